"""What an agent sees when it proposes: the parent engine's sources and figures, the unmet acceptance
criteria, recent failures of this run (edit errors included) and the lessons filed for this architecture.
"""
from __future__ import annotations

import json

from evaluator.verdict import Verdict
from knowledge_base import EngineKey, Figures, KnowledgeStore
from targets import Target

from .outcome import DUPLICATE, is_promising, unmet_criteria
from .proposal import Lesson, ProposalContext
from .run_state import ParentEngine, RunView, lineage_transforms

MAX_FAILURES = 8
MAX_LESSONS = 24


def describe_figures(figures: Figures, speedup_vs_baseline: float) -> str:
    if figures.frames_per_s is None:
        return "not measured yet (the first evaluation measures the baseline)"
    return (f"frames/s p50 {figures.frames_per_s:.1f}, TTFA p50 {figures.ttfa_ms:.2f} ms, RTF p50 {figures.rtf:.4f}; "
            f"{speedup_vs_baseline:.3f}x the run's baseline")


def describe_acceptance(target: Target, parent: ParentEngine, speedup_vs_baseline: float) -> str:
    unmet = unmet_criteria(target.acceptance, parent.figures, speedup_vs_baseline)
    gate = (f"each candidate must be correct and at least {target.benchmark.min_speedup:g}x the parent's frames/s "
            "(lower confidence bound)")
    return "; ".join(unmet + [gate])


def recent_failures(view: RunView, limit: int = MAX_FAILURES) -> list[str]:
    failures = []
    for c in view.candidates:
        verdict = view.verdicts.get(c.id)
        if verdict is None or verdict.status in ("pass", DUPLICATE):
            continue
        if verdict.verdict_json and is_promising(Verdict.model_validate_json(verdict.verdict_json)):
            continue  # a small but real gain is a lesson to build on, not a failure to avoid
        evidence = "; ".join(e["message"] for e in json.loads(verdict.evidence_json)[:2])
        detail = f" | {evidence[:400]}" if evidence and evidence != verdict.summary else ""
        failures.append(f"{c.title} ({verdict.status}): {verdict.summary}{detail}")
    return failures[-limit:]


def build_context(target: Target, kb: KnowledgeStore, view: RunView, key: EngineKey, parent: ParentEngine,
                  parent_files: dict[str, str], iteration: int, slot: int) -> ProposalContext:
    speedup = view.speedup_vs_baseline(parent)
    lessons = [Lesson(feature=x.feature, outcome=x.outcome, summary=x.summary, evidence=x.evidence)
               for x in kb.lessons(architecture=key.architecture, limit=MAX_LESSONS)]
    return ProposalContext(
        target_name=target.name,
        model_config_name=target.model.config,
        device=target.hardware.device,
        gpu=target.hardware.gpu,
        parent_id=parent.id,
        parent_files=parent_files,
        parent_figures=describe_figures(parent.figures, speedup),
        acceptance=describe_acceptance(target, parent, speedup),
        failures=recent_failures(view),
        lessons=lessons,
        applied_transforms=lineage_transforms(kb, parent.id),
        iteration=iteration,
        slot=slot,
    )
