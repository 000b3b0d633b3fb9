"""Baseline resolution: "reference", a kept engine id, or "best" (the fastest kept engine for this architecture
and hardware, preferring this software stack). A kept engine is re-verified on the current hardware and
software before it becomes a baseline; one that fails is reported, filed as a lesson, and the reference is used,
unless it ran out of memory: then the machine is too small for it, and the run does not start.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from candidates import EngineRepo
from evaluator import Status
from knowledge_base import REFERENCE_ID, EngineKey, KeptEngine, KnowledgeStore, LessonRecord

from .executor import EvalJob, Executor

log = logging.getLogger(__name__)


class BaselineError(ValueError):
    """The target names a baseline that does not exist or does not fit it."""


@dataclass(frozen=True, slots=True)
class ResolvedBaseline:
    engine_id: str  # REFERENCE_ID or a kept engine id
    commit: str
    checked: KeptEngine | None = None  # the kept engine that was re-verified, whether or not it passed
    check_ok: bool = True
    check_summary: str = ""


def _fits(kept: KeptEngine, key: EngineKey) -> bool:
    k = kept.key
    same = ("architecture", "model_config", "device", "gpu")
    return all(getattr(k, name) == getattr(key, name) for name in same)


def best_kept(kb: KnowledgeStore, key: EngineKey) -> KeptEngine | None:
    """The fastest kept engine for this architecture and hardware; this exact software stack wins ties of fit."""
    fitting = [k for k in kb.kept_engines() if _fits(k, key)]
    if not fitting:
        return None
    return max(fitting, key=lambda k: (k.key == key, k.speedup_vs_reference))


def choose_kept(kb: KnowledgeStore, request: str, key: EngineKey) -> KeptEngine | None:
    """The kept engine the target's `baseline:` asks for, or None for the reference."""
    if request == REFERENCE_ID:
        return None
    if request == "best":
        return best_kept(kb, key)
    try:
        kept = kb.kept_engine(request)
    except KeyError as e:
        raise BaselineError(f"baseline: {request!r} is not a kept engine; use 'reference', 'best' or an id "
                            "from `swarm kb list`") from e
    if (kept.key.architecture, kept.key.model_config) != (key.architecture, key.model_config):
        raise BaselineError(f"baseline: kept engine {request} was built for {kept.key.model_config} "
                            f"({kept.key.architecture}), this target runs {key.model_config}; "
                            "use 'best' or 'reference'")
    return kept


def resolve_baseline(kb: KnowledgeStore, repo: EngineRepo, executor: Executor, *, request: str, key: EngineKey,
                     reference_dir: Path, reference_commit: str, run_id: str, work_dir: Path,
                     secret_seed: int) -> ResolvedBaseline:
    kept = choose_kept(kb, request, key)
    if kept is None:
        return ResolvedBaseline(REFERENCE_ID, reference_commit)
    engine_dir = repo.materialise(kept.git_commit, work_dir / "engine")
    # correctness only: the engine was timed when it was kept, and the run uses only whether it is still correct;
    # with the benchmark (against the eager reference, ~0.26 s a frame at full size) the re-verification took
    # ~6 minutes of a 9-minute H200 lease (session 7)
    job = EvalJob(candidate_id=kept.id, candidate_dir=engine_dir, baseline_dir=reference_dir,
                  work_dir=work_dir / "eval", secret_seed=secret_seed, correctness_only=True)
    verdict = next(iter(executor.evaluate_all([job]))).verdict
    if verdict.status.is_correct:
        log.info("kept engine %s re-verified on %s, %s", kept.id, key.hardware, key.software)
        return ResolvedBaseline(kept.id, kept.git_commit, kept, True, verdict.summary)
    if verdict.status is Status.OOM:
        # not a fault of the engine: this machine cannot hold it beside the reference, nor would it hold the engines
        # built on it, so falling back to the reference would spend the budget on another experiment
        raise BaselineError(f"baseline: kept engine {kept.id} (kept on {kept.key.hardware}) does not fit in memory on "
                            f"{key.hardware} beside the reference engine that judges it ({verdict.summary[:300]}): "
                            "run this target on a device with more memory")
    summary = (f"kept engine {kept.id} failed re-verification on {key.hardware} ({key.software}): "
               f"{verdict.status.value}: {verdict.summary}; falling back to the reference")
    log.warning(summary)
    kb.add_lesson(LessonRecord(run_id=run_id, candidate_id=kept.id, feature="engine", outcome="failed",
                               summary=summary, evidence="; ".join(e.message for e in verdict.evidence[:3])[:600],
                               architecture=key.architecture))
    return ResolvedBaseline(REFERENCE_ID, reference_commit, kept, False, summary)
