"""Claude models through the official Anthropic SDK (`anthropic.Anthropic().messages.create`)."""
from __future__ import annotations

import inspect
import logging

import anthropic

from targets.schema import AgentSpec

from .ledger import CostLedger
from .llm import (
    DEFAULT_RETRY,
    Completion,
    LLMAgent,
    Message,
    RetryPolicy,
)

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 600.0
# Newer SDKs (2.x) dropped sampling temperature from messages.create; older ones take it.
SDK_TAKES_TEMPERATURE = "temperature" in inspect.signature(anthropic.resources.Messages.create).parameters


class AnthropicAgent(LLMAgent):
    provider = "anthropic"
    key_env = "ANTHROPIC_API_KEY"

    def __init__(self, name: str, spec: AgentSpec, ledger: CostLedger, retry: RetryPolicy = DEFAULT_RETRY):
        super().__init__(name, spec, ledger, retry)
        api_key = self._api_key("")
        # An explicit timeout also lifts the SDK's refusal of long non-streaming requests.
        self.client = anthropic.Anthropic(api_key=api_key, base_url=spec.base_url, max_retries=0,
                                          timeout=REQUEST_TIMEOUT_S)
        self.sampling = {"temperature": spec.temperature} if SDK_TAKES_TEMPERATURE else {}
        if not SDK_TAKES_TEMPERATURE:
            log.info("%s: anthropic %s has no temperature parameter; the model's default sampling is used",
                     name, anthropic.__version__)

    def _send(self, system: str, messages: list[Message]) -> Completion:
        response = self.client.messages.create(
            model=self.spec.model,
            max_tokens=self.spec.max_tokens,
            system=system,
            messages=[{"role": m.role, "content": m.content} for m in messages],
            **self.sampling,
        )
        text = "".join(block.text for block in response.content if block.type == "text")
        usage = response.usage
        # Cached prompt tokens are billed too; count them as input so the cap stays conservative.
        input_tokens = (usage.input_tokens + (usage.cache_creation_input_tokens or 0)
                        + (usage.cache_read_input_tokens or 0))
        return Completion(text=text, input_tokens=input_tokens, output_tokens=usage.output_tokens,
                          truncated=response.stop_reason == "max_tokens")

    def _api_errors(self) -> tuple[type[Exception], ...]:
        return (anthropic.APIStatusError, anthropic.APIConnectionError)
