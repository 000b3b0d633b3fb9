"""Lesson outcomes: a correct candidate that is faster with confidence but under the noise band is promising; the
acceptance criteria an engine misses."""
from __future__ import annotations

from evaluator.verdict import Comparison, FirstAudio, Status, Verdict
from knowledge_base import Figures
from swarm.outcome import is_promising, lesson_outcome, unmet_aims, unmet_criteria
from targets.schema import AcceptanceSpec


def verdict(status: Status, ci_low: float | None, ttfa_ci_low: float | None = None) -> Verdict:
    sooner = (None if ttfa_ci_low is None else
              FirstAudio(speedup=ttfa_ci_low + 0.01, ci_low=ttfa_ci_low, ci_high=ttfa_ci_low + 0.02, threshold=1.04,
                         spread=0.01))
    comparison = (None if ci_low is None else
                  Comparison(speedup=ci_low + 0.02, ci_low=ci_low, ci_high=ci_low + 0.05, threshold=1.12,
                             ttfa_ratio=1.0, first_audio=sooner))
    return Verdict(status=status, candidate="c", baseline="b", summary="s", comparison=comparison)


def test_outcomes():
    assert lesson_outcome(verdict(Status.PASS, 1.3), kept=True) == "worked"
    assert lesson_outcome(verdict(Status.SLOWER, 1.02), kept=False) == "promising"
    assert lesson_outcome(verdict(Status.NOISY, 1.4), kept=False) == "promising"
    assert lesson_outcome(verdict(Status.SLOWER, 0.98), kept=False) == "failed"  # CI reaches below 1
    assert lesson_outcome(verdict(Status.MISMATCH, None), kept=False) == "failed"
    assert not is_promising(verdict(Status.CHEAT_SUSPECTED, 1.5))


def test_sooner_first_audio_is_promising_unless_frames_are_slower():
    """A prefill change: TTFA 1.02-1.04x with confidence, under its 1.04 threshold; frames/s within noise."""
    assert is_promising(verdict(Status.SLOWER, 0.98, ttfa_ci_low=1.02))  # frames/s CI 0.98-1.03
    assert not is_promising(verdict(Status.SLOWER, 0.90, ttfa_ci_low=1.02))  # frames/s 0.90-0.95: slower
    assert not is_promising(verdict(Status.SLOWER, 0.98, ttfa_ci_low=0.99))  # TTFA not sooner with confidence


def test_unmet_aims_name_the_acceptance_fields_unmet_criteria_list():
    """Session 16's kept engine on the H200 target: every figure misses; with TTFA met, the others remain."""
    acceptance = AcceptanceSpec(frames_per_s=400, ttfa_ms=15, rtf=0.06)
    kept = Figures(frames_per_s=281.2, ttfa_ms=26.5, rtf=0.077)
    assert unmet_aims(acceptance, kept, 1.2) == ["frames_per_s", "ttfa_ms", "rtf"]
    assert len(unmet_criteria(acceptance, kept, 1.2)) == 3
    sooner = Figures(frames_per_s=281.2, ttfa_ms=14.0, rtf=0.077)
    assert unmet_aims(acceptance, sooner, 1.2) == ["frames_per_s", "rtf"]
    assert unmet_aims(AcceptanceSpec(speedup=1.5), kept, 1.2) == ["speedup"]
    assert unmet_aims(AcceptanceSpec(ttfa_ms=15), Figures(), 1.0) == ["ttfa_ms"]  # unmeasured
