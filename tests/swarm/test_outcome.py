"""Lesson outcomes: a correct candidate that is faster with confidence but under the noise band is promising."""
from __future__ import annotations

from evaluator.verdict import Comparison, Status, Verdict
from swarm.outcome import is_promising, lesson_outcome


def verdict(status: Status, ci_low: float | None) -> Verdict:
    comparison = (None if ci_low is None else
                  Comparison(speedup=ci_low + 0.02, ci_low=ci_low, ci_high=ci_low + 0.05, threshold=1.12,
                             ttfa_ratio=1.0))
    return Verdict(status=status, candidate="c", baseline="b", summary="s", comparison=comparison)


def test_outcomes():
    assert lesson_outcome(verdict(Status.PASS, 1.3), kept=True) == "worked"
    assert lesson_outcome(verdict(Status.SLOWER, 1.02), kept=False) == "promising"
    assert lesson_outcome(verdict(Status.NOISY, 1.4), kept=False) == "promising"
    assert lesson_outcome(verdict(Status.SLOWER, 0.98), kept=False) == "failed"  # CI reaches below 1
    assert lesson_outcome(verdict(Status.MISMATCH, None), kept=False) == "failed"
    assert not is_promising(verdict(Status.CHEAT_SUSPECTED, 1.5))
