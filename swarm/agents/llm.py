"""What every LLM-backed agent shares: prompt, bounded retries with backoff, cost accounting, one repair turn.

A provider subclass (Anthropic, OpenAI-compatible) only says how to send messages through its official SDK
and which SDK exceptions mean "retry". The SDKs' own retries are off (max_retries=0) so that every attempt is
logged here and tests can drive the backoff.
"""
from __future__ import annotations

import logging
import os
import math
import re
import time
from dataclasses import dataclass
from typing import Literal

from targets.schema import AgentSpec

from ..edits import SEARCH_MARK, EditError, apply_edits, parse_edits
from ..proposal import Proposal, ProposalContext
from .base import AgentError, AgentExhausted
from .ledger import CallRecord, CostLedger
from .pricing import cost_usd, price_of
from .prompt import PromptTooLong, proposal_prompt, repair_prompt, system_prompt

log = logging.getLogger(__name__)
LOCAL_DUMMY_KEY = "local"  # a self-hosted server behind base_url ignores the key, but the SDKs require one
RETRY_STATUS = frozenset({408, 409, 429})  # plus every 5xx (incl. Anthropic's 529 "overloaded")
# Characters per token of our prompts, estimated low (code runs ~3.5-4), so budgets err on the safe side.
CHARS_PER_TOKEN = 3
REPAIR_TOKENS = 1000  # the repair turn's own instructions and quoted error
WINDOW_MARGIN = 0.9  # of context_tokens a prompt may plan on: small-vocabulary tokenizers split code finer
_TITLE = re.compile(r"^\s*TITLE:\s*(.+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    truncated: bool  # stopped at max_tokens


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 2.0  # doubled on every retry
    max_delay_s: float = 60.0


DEFAULT_RETRY = RetryPolicy()


class LLMAgent:
    """Base of the SDK-backed agents; subclasses implement `_send` and `_retry_after`."""

    provider: str
    key_env: str  # the environment variable holding the API key

    def __init__(self, name: str, spec: AgentSpec, ledger: CostLedger, retry: RetryPolicy = DEFAULT_RETRY):
        self.name = name
        self.spec = spec
        self.ledger = ledger
        self.retry = retry
        self.price = price_of(spec.model, custom_endpoint=spec.base_url is not None)

    def _api_key(self, alternatives: str) -> str:
        """The provider's key from the environment; a self-hosted base_url takes a placeholder."""
        key = os.environ.get(self.key_env) or (LOCAL_DUMMY_KEY if self.spec.base_url else None)
        if not key:
            raise AgentError(f"agent {self.name} ({self.provider}, {self.spec.model}) needs an API key: set "
                             f"{self.key_env}, {alternatives}or use provider: offline in the target")
        return key

    def propose(self, context: ProposalContext) -> Proposal:
        system = system_prompt()
        messages = [Message("user", self._prompt(context, system))]
        calls = [self._call(system, messages)]
        try:
            return self._proposal(calls, context)
        except EditError as first:
            log.info("%s: edits rejected (%s); asking for one repair", self.name, _first_line(str(first)))
            messages += [Message("assistant", calls[0].text), Message("user", repair_prompt(_explain(first, calls[0])))]
            calls.append(self._call(system, messages))
            try:
                return self._proposal(calls, context)
            except EditError as second:
                raise AgentError(f"{self.name}: edits still unusable after one repair turn: "
                                 f"{_explain(second, calls[-1])}") from second

    def _prompt(self, context: ProposalContext, system: str) -> str:
        """The proposal prompt, within the agent's context_tokens (if set) next to two answers: the first, and
        the one a repair turn asks for after it."""
        window = self.spec.context_tokens
        if window is None:
            return proposal_prompt(context)
        usable = int(window * WINDOW_MARGIN) - 2 * self.spec.max_tokens - REPAIR_TOKENS
        max_chars = usable * CHARS_PER_TOKEN - len(system)
        try:
            if max_chars <= 0:
                raise PromptTooLong(f"context_tokens {window} leaves no room for a prompt next to two answers of "
                                    f"max_tokens {self.spec.max_tokens}")
            return proposal_prompt(context, max_chars)
        except PromptTooLong as e:
            raise AgentExhausted(f"{self.name}: {e}; raise the agent's context_tokens or lower its max_tokens") from e

    def _proposal(self, calls: list[Completion], context: ProposalContext) -> Proposal:
        text = calls[-1].text
        edits = parse_edits(text)
        apply_edits(context.parent_files, edits)  # the loop applies them again; this only validates
        title_match = _TITLE.search(text)
        title = title_match.group(1).strip() if title_match else _first_line(text)[:80]
        input_tokens = sum(c.input_tokens for c in calls)
        output_tokens = sum(c.output_tokens for c in calls)
        return Proposal(agent=self.name, title=title, rationale=_rationale(text, edits[0].path), edits=edits,
                        input_tokens=input_tokens, output_tokens=output_tokens,
                        cost_usd=cost_usd(self.price, input_tokens, output_tokens))

    def _call(self, system: str, messages: list[Message]) -> Completion:
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        worst = cost_usd(self.price, math.ceil(prompt_chars / CHARS_PER_TOKEN), self.spec.max_tokens)
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                with self.ledger.hold(self.name, worst) as hold:
                    completion = self._send(system, messages)
                    hold.charge(CallRecord(self.name, self.spec.model, completion.input_tokens,
                                           completion.output_tokens,
                                           cost_usd(self.price, completion.input_tokens, completion.output_tokens)))
                log.info("%s: %s answered (%d in / %d out tokens)", self.name, self.spec.model,
                         completion.input_tokens, completion.output_tokens)
                return completion
            except self._api_errors() as e:
                server_wait = self._retry_after(e)
                if server_wait is None or attempt == self.retry.max_attempts:
                    raise AgentError(f"{self.name}: {self.provider} call failed after {attempt} attempt(s): "
                                     f"{_describe(e)}{self._fix_hint(e)}") from e
                delay = min(self.retry.max_delay_s, max(server_wait, self.retry.base_delay_s * 2 ** (attempt - 1)))
                log.warning("%s: %s (attempt %d/%d); retrying in %.2f s", self.name, _describe(e), attempt,
                            self.retry.max_attempts, delay)
                time.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _send(self, system: str, messages: list[Message]) -> Completion:
        raise NotImplementedError

    def _api_errors(self) -> tuple[type[Exception], ...]:
        """The SDK's exception types for failed requests (status errors and connection errors)."""
        raise NotImplementedError

    def _retry_after(self, error: Exception) -> float | None:
        """Seconds the server asks to wait (0 if it does not say) when `error` is worth retrying, else None."""
        status = getattr(error, "status_code", None)
        if status is not None and status not in RETRY_STATUS and status < 500:
            return None
        response = getattr(error, "response", None)
        header = response.headers.get("retry-after") if response is not None else None
        try:
            return float(header) if header else 0.0
        except ValueError:
            return 0.0

    def _fix_hint(self, error: Exception) -> str:
        status = getattr(error, "status_code", None)
        if status in (401, 403):
            return f" (check the API key in ${self.key_env})"
        if status == 404:
            return f" (check the model name {self.spec.model!r} and base_url in the target's agents)"
        return ""


def _rationale(text: str, first_path: str) -> str:
    """The prose before the first edit block, without the TITLE line, the block's path line and fences."""
    lines = _TITLE.sub("", text[:text.find(SEARCH_MARK)]).rstrip().splitlines()
    while lines and (not lines[-1].strip() or lines[-1].strip().startswith("```") or first_path in lines[-1]):
        lines.pop()
    return "\n".join(lines).strip()


def _describe(error: Exception) -> str:
    status = getattr(error, "status_code", None)
    return f"HTTP {status}: {_first_line(str(error))}" if status else f"{type(error).__name__}: {error}"


def _explain(error: EditError, completion: Completion) -> str:
    if completion.truncated:
        return f"{error}\n(Your answer was cut off at the max_tokens limit: make fewer, smaller edit blocks.)"
    return str(error)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
