"""What an agent sees when it proposes: the parent engine's sources and figures (where its time goes
included), the unmet acceptance criteria, recent failures of this run (edit errors included) and the lessons
filed for this architecture.
"""
from __future__ import annotations

import json

from evaluator.verdict import Profile, Verdict
from knowledge_base import EngineKey, Figures, KnowledgeStore
from knowledge_base.hardware import LAUNCH_COSTS
from targets import Target

from .outcome import DUPLICATE, is_promising, unmet_aims, unmet_criteria
from .proposal import Lesson, ProposalContext
from .run_state import SKIPPED, ParentEngine, RunView, lineage_transforms

MAX_FAILURES = 8
MAX_LESSONS = 24
PROFILE_LINES = 12  # of the parent's profile in the prompt, the top entries by self time


def describe_figures(figures: Figures, speedup_vs_baseline: float) -> str:
    if figures.frames_per_s is None:
        return "not measured yet (the first evaluation measures the baseline)"
    return (f"frames/s p50 {figures.frames_per_s:.1f}, TTFA p50 {figures.ttfa_ms:.2f} ms, RTF p50 {figures.rtf:.4f}; "
            f"{speedup_vs_baseline:.3f}x the run's baseline")


def describe_profile(profile: Profile, gpu: str | None = None) -> str:
    """With a `gpu` whose launch cost is measured (knowledge_base.hardware), a CUDA profile's launch count in ms."""
    what = "CUDA kernels, self device time" if profile.source == "cuda" else "CPU ops, self CPU time"
    head = (f"Where the parent's time goes per frame ({what}; {profile.total_ms_per_frame:.3f} ms and "
            f"{profile.total_calls_per_frame:.1f} calls in all, over {profile.frames} streamed frames):")
    lines = [head, f"{'ms':>9} {'calls':>8}  op/kernel"]
    lines += [f"{r.ms_per_frame:9.3f} {r.calls_per_frame:8.1f}  {r.name}" for r in profile.rows[:PROFILE_LINES]]
    cost = LAUNCH_COSTS.get(gpu or "")
    if profile.source == "cuda" and cost is not None:
        lines.append(cost.describe(gpu, profile.total_calls_per_frame, profile.total_ms_per_frame))
    return "\n".join(lines)


def parent_profile(view: RunView, parent: ParentEngine) -> Profile | None:
    """The PASS verdict that kept the parent profiled it as the candidate; the run's baseline was profiled as the
    baseline by the first verdicts against it (and every candidate is measured against its parent)."""
    sources = [(view.verdicts.get(parent.id), "candidate_profile")]
    sources += [(view.verdicts.get(c.id), "baseline_profile") for c in view.candidates if c.parent_id == parent.id]
    for record, field in sources:
        if record is not None and record.verdict_json:
            profile = getattr(Verdict.model_validate_json(record.verdict_json), field)
            if profile is not None:
                return profile
    return None


def describe_acceptance(target: Target, parent: ParentEngine, speedup_vs_baseline: float) -> str:
    unmet = unmet_criteria(target.acceptance, parent.figures, speedup_vs_baseline)
    gate = (f"each candidate must be correct and at least {target.benchmark.min_speedup:g}x the parent's frames/s, "
            f"or reach first audio at least {target.benchmark.min_speedup:g}x sooner while its frames/s holds "
            "(lower confidence bounds, raised to the measured A/A noise where that is wider)")
    return "; ".join(unmet + [gate])


def recent_failures(view: RunView, limit: int = MAX_FAILURES) -> list[str]:
    failures = []
    for c in view.candidates:
        verdict = view.verdicts.get(c.id)
        if verdict is None or verdict.status in ("pass", DUPLICATE, SKIPPED):
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
    figures, profile = describe_figures(parent.figures, speedup), parent_profile(view, parent)
    if profile is not None:
        figures = f"{figures}\n{describe_profile(profile, target.hardware.gpu)}"
    lessons = [Lesson(feature=x.feature, outcome=x.outcome, summary=x.summary, evidence=x.evidence,
                      verdict=x.verdict)
               for x in kb.lessons(architecture=key.architecture, limit=MAX_LESSONS)]
    return ProposalContext(
        target_name=target.name,
        model_config_name=target.model.config,
        device=target.hardware.device,
        gpu=target.hardware.gpu,
        parent_id=parent.id,
        parent_files=parent_files,
        parent_figures=figures,
        parent_kernels={} if profile is None else {r.name: r.ms_per_frame for r in profile.rows},
        acceptance=describe_acceptance(target, parent, speedup),
        unmet_aims=unmet_aims(target.acceptance, parent.figures, speedup),
        failures=recent_failures(view),
        lessons=lessons,
        applied_transforms=lineage_transforms(kb, parent.id),
        measured_on_parent=[c.title for c in view.candidates
                            if c.parent_id == parent.id and c.git_commit and not view.skipped(c.id)],
        iteration=iteration,
        slot=slot,
    )
