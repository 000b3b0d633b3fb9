"""Selective retention: what a verdict becomes in the knowledge base (verdict row, lesson, kept engine), and
whether the run's best engine meets the target's acceptance criteria.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath

from evaluator.verdict import Status, Verdict
from knowledge_base import CandidateRecord, EngineKey, Figures, KeptEngine, LessonRecord, VerdictRecord
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.base import FIRST_AUDIO_AIM
from targets.schema import AcceptanceSpec

from .proposal import Proposal, parent_label
from .run_state import ParentEngine

EDIT_ERROR = "edit_error"  # a proposal whose SEARCH/REPLACE edits did not apply
AGENT_ERROR = "agent_error"  # an agent that returned no usable proposal
DUPLICATE = "duplicate"  # an engine identical to an earlier candidate of the run (not evaluated again)

# Which architecture feature an engine file implements; lessons are filed under it.
_FEATURE_OF_FILE = {
    "moe": "fp8_moe", "deltanet": "gated_deltanet", "attention": "gated_attention", "kv_cache": "gated_attention",
    "tower": "codebook_mtp", "codec": "dac_codec", "sampling": "sampling",
}


def feature_of(proposal: Proposal) -> str:
    """The features a proposal touches: its transforms' own, else those of the files it edits."""
    if proposal.transforms and all(t in TRANSFORMS for t in proposal.transforms):
        features = {TRANSFORMS[t].feature for t in proposal.transforms}
    else:
        features = {_FEATURE_OF_FILE.get(PurePosixPath(e.path).stem, "engine") for e in proposal.edits}
    return ",".join(sorted(features)) or "engine"


def verdict_figures(verdict: Verdict) -> Figures:
    bench = verdict.candidate_bench
    if bench is None or not bench.prompts:
        return Figures()
    return Figures(frames_per_s=bench.median("frames_per_s_p50"), ttfa_ms=bench.median("ttfa_ms_p50"),
                   rtf=bench.median("rtf_p50"), speedup=verdict.comparison.speedup if verdict.comparison else None)


def baseline_figures(verdict: Verdict) -> Figures | None:
    bench = verdict.baseline_bench
    if bench is None or not bench.prompts:
        return None
    return Figures(frames_per_s=bench.median("frames_per_s_p50"), ttfa_ms=bench.median("ttfa_ms_p50"),
                   rtf=bench.median("rtf_p50"), speedup=1.0)


def _evidence_text(verdict: Verdict, limit: int = 600) -> str:
    return "; ".join(e.message for e in verdict.evidence[:3])[:limit]


def is_promising(verdict: Verdict) -> bool:
    """Correct and faster than its parent with confidence (CI above 1), yet not past the run's noise band: too
    small a gain to keep alone, worth stacking with other such changes. Sooner first audio with confidence counts
    too where frames/s is not slower with confidence: a prefill change moves a stream's frames/s by a fraction of
    its TTFA gain, so it would never stack on frames/s alone."""
    c = verdict.comparison
    if verdict.status not in (Status.SLOWER, Status.NOISY) or c is None:
        return False
    sooner = c.first_audio is not None and c.first_audio.ci_low > 1.0 and c.ci_high >= 1.0
    return c.ci_low > 1.0 or sooner


def lesson_outcome(verdict: Verdict, kept: bool) -> str:
    return "worked" if kept else "promising" if is_promising(verdict) else "failed"


def retain(candidate: CandidateRecord, proposal: Proposal, verdict: Verdict, seconds: float, parent: ParentEngine,
           key: EngineKey) -> tuple[VerdictRecord, LessonRecord, KeptEngine | None]:
    """Records for one evaluated candidate; a PASS (correct, faster than its parent beyond noise) is kept."""
    figures = verdict_figures(verdict)
    record = VerdictRecord(
        candidate_id=candidate.id, status=verdict.status.value, summary=verdict.summary,
        evidence_json=json.dumps([e.model_dump(exclude_none=True) for e in verdict.evidence]),
        verdict_json=verdict.model_dump_json(), figures=figures, eval_seconds=seconds)
    kept = None
    measured_on = parent_label(parent.id, key.model_config, key.device, key.gpu)
    if verdict.status is Status.PASS and figures.speedup is not None:
        kept = KeptEngine(id=candidate.id, run_id=candidate.run_id, parent_id=parent.id,
                          git_commit=candidate.git_commit, key=key, figures=figures, title=candidate.title,
                          speedup_vs_reference=parent.speedup_vs_reference * figures.speedup)
        summary = f"{candidate.title}: kept, {figures.speedup:.3f}x frames/s over {measured_on}"
    else:
        summary = f"{candidate.title} on {measured_on}: {verdict.status.value}: {verdict.summary}"
    lesson = LessonRecord(run_id=candidate.run_id, candidate_id=candidate.id, feature=feature_of(proposal),
                          outcome=lesson_outcome(verdict, kept is not None), summary=summary,
                          evidence=_evidence_text(verdict), architecture=key.architecture)
    return record, lesson, kept


def rejection(candidate: CandidateRecord, status: str, error: str, feature: str,
              key: EngineKey) -> tuple[VerdictRecord, LessonRecord | None]:
    """Records for a proposal that never became an engine; edit errors teach a lesson, agent failures do not."""
    first_line = error.strip().splitlines()[0] if error.strip() else status
    record = VerdictRecord(candidate_id=candidate.id, status=status, summary=first_line,
                           evidence_json=json.dumps([{"check": status, "message": error}]), verdict_json="",
                           figures=Figures())
    if status != EDIT_ERROR:
        return record, None
    lesson = LessonRecord(run_id=candidate.run_id, candidate_id=candidate.id, feature=feature, outcome="failed",
                          summary=f"{candidate.title}: edits did not apply: {first_line}", evidence=error[:600],
                          architecture=key.architecture)
    return record, lesson


@dataclass(frozen=True, slots=True)
class Criterion:
    aim: str  # the AcceptanceSpec field
    label: str
    goal: float
    value: float | None  # the engine's figure; None: not measured
    at_least: bool  # the goal is a floor (frames/s, speedup), else a ceiling (TTFA, RTF)

    @property
    def missed(self) -> bool:
        return self.value is None or (self.value < self.goal if self.at_least else self.value > self.goal)

    def __str__(self) -> str:
        now = "not measured" if self.value is None else f"{self.value:.4g}"
        return f"{self.label} {'>=' if self.at_least else '<='} {self.goal:g} (now {now})"


def _criteria(acceptance: AcceptanceSpec, figures: Figures, speedup_vs_baseline: float) -> list[Criterion]:
    """Each criterion the acceptance sets, with the engine's figure."""
    rows = [("frames_per_s", "frames/s p50", acceptance.frames_per_s, figures.frames_per_s, True),
            (FIRST_AUDIO_AIM, "TTFA p50 ms", acceptance.ttfa_ms, figures.ttfa_ms, False),
            ("rtf", "RTF p50", acceptance.rtf, figures.rtf, False),
            ("speedup", "speedup vs the run's baseline", acceptance.speedup, speedup_vs_baseline, True)]
    return [Criterion(*row) for row in rows if row[2] is not None]


def unmet_criteria(acceptance: AcceptanceSpec, figures: Figures, speedup_vs_baseline: float) -> list[str]:
    """Acceptance criteria the engine does not meet yet, human-readable; [] when all hold."""
    return [str(c) for c in _criteria(acceptance, figures, speedup_vs_baseline) if c.missed]


def unmet_aims(acceptance: AcceptanceSpec, figures: Figures, speedup_vs_baseline: float) -> list[str]:
    """The AcceptanceSpec fields of the criteria unmet_criteria lists: what the offline proposer's priors weigh."""
    return [c.aim for c in _criteria(acceptance, figures, speedup_vs_baseline) if c.missed]


def has_criteria(acceptance: AcceptanceSpec) -> bool:
    return any(v is not None for v in acceptance.model_dump().values())
