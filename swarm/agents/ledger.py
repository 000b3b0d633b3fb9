"""The shared CostLedger: every LLM call's tokens and dollars, under one hard dollar cap.

A call first reserves its worst-case cost (prompt estimate + max_tokens of output); the reservation is
refused with BudgetExceeded when spent + reserved + worst case would cross the cap, so parallel agents
cannot overshoot it together. The settled call records its actual usage.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .base import BudgetExceeded


@dataclass(frozen=True, slots=True)
class CallRecord:
    agent: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float


class Hold:
    """A reservation made by `CostLedger.hold`; `charge` it with the call's actual usage."""

    def __init__(self) -> None:
        self.record: CallRecord | None = None

    def charge(self, record: CallRecord) -> None:
        self.record = record


class CostLedger:
    def __init__(self, cap_usd: float | None = None, spent_usd: float = 0.0) -> None:
        self.cap_usd = cap_usd
        self.spent_usd = spent_usd  # a resumed run passes what it had already spent
        self.calls: list[CallRecord] = []
        self._reserved_usd = 0.0
        self._lock = threading.Lock()

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)

    @contextmanager
    def hold(self, agent: str, worst_usd: float) -> Iterator[Hold]:
        """Reserve `worst_usd` for one call; on exit record what the call charged (nothing if it failed)."""
        with self._lock:
            if self.cap_usd is not None and self.spent_usd + self._reserved_usd + worst_usd > self.cap_usd:
                raise BudgetExceeded(
                    f"{agent}: a call could cost up to ${worst_usd:.4f}, and ${self.spent_usd:.4f} spent "
                    f"+ ${self._reserved_usd:.4f} in flight would cross the ${self.cap_usd:.2f} cap "
                    "(raise budget.dollars in the target or lower the agent's max_tokens)")
            self._reserved_usd += worst_usd
        hold = Hold()
        try:
            yield hold
        finally:
            with self._lock:
                self._reserved_usd -= worst_usd
                if hold.record is not None:
                    self.calls.append(hold.record)
                    self.spent_usd += hold.record.cost_usd
