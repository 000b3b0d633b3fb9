"""OpenAI models, or any OpenAI-compatible server (vLLM, llama.cpp, ollama) via `base_url`, through the
official OpenAI SDK (`openai.OpenAI(base_url=...).chat.completions.create`)."""
from __future__ import annotations


import openai

from targets.schema import AgentSpec

from .ledger import CostLedger
from .llm import (
    DEFAULT_RETRY,
    Completion,
    LLMAgent,
    Message,
    RetryPolicy,
)

REQUEST_TIMEOUT_S = 600.0


class OpenAIAgent(LLMAgent):
    provider = "openai"
    key_env = "OPENAI_API_KEY"

    def __init__(self, name: str, spec: AgentSpec, ledger: CostLedger, retry: RetryPolicy = DEFAULT_RETRY):
        super().__init__(name, spec, ledger, retry)
        api_key = self._api_key("give the agent a base_url for a local OpenAI-compatible server, ")
        self.client = openai.OpenAI(api_key=api_key, base_url=spec.base_url, max_retries=0,
                                    timeout=REQUEST_TIMEOUT_S)

    def _send(self, system: str, messages: list[Message]) -> Completion:
        # OpenAI's own API wants max_completion_tokens (its reasoning models reject max_tokens);
        # self-hosted servers reliably understand only max_tokens.
        limit = {"max_tokens" if self.spec.base_url else "max_completion_tokens": self.spec.max_tokens}
        response = self.client.chat.completions.create(
            model=self.spec.model,
            temperature=self.spec.temperature,
            messages=[{"role": "system", "content": system},
                      *({"role": m.role, "content": m.content} for m in messages)],
            **limit,
        )
        choice = response.choices[0]
        usage = response.usage  # some local servers omit it: count 0 tokens (they cost nothing anyway)
        return Completion(text=choice.message.content or "",
                          input_tokens=usage.prompt_tokens if usage else 0,
                          output_tokens=usage.completion_tokens if usage else 0,
                          truncated=choice.finish_reason == "length")

    def _api_errors(self) -> tuple[type[Exception], ...]:
        return (openai.APIStatusError, openai.APIConnectionError)
