"""A run's state, derived from the knowledge base alone (so a resumed run continues exactly where it stopped):
which engine each iteration forks from, which slots are filled, what remains to evaluate, what was spent.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from knowledge_base import (
    REFERENCE_ID,
    CandidateRecord,
    CandidateState,
    Figures,
    KeptEngine,
    KnowledgeStore,
    RunRecord,
    VerdictRecord,
)

from .budget import Spend


SKIPPED = "skipped"  # the status of an engine left unevaluated by a resume with skip_pending


def candidate_id(run_id: str, iteration: int, slot: int) -> str:
    return f"{run_id}.i{iteration:03d}.s{slot:02d}"


@dataclass(frozen=True, slots=True)
class ParentEngine:
    """An engine candidates fork from: the run's baseline or one of its kept engines."""

    id: str
    commit: str
    figures: Figures
    speedup_vs_reference: float


@dataclass(frozen=True, slots=True)
class RunView:
    run: RunRecord
    baseline: ParentEngine
    candidates: list[CandidateRecord]
    verdicts: dict[str, VerdictRecord]
    kept: list[KeptEngine]

    @classmethod
    def load(cls, kb: KnowledgeStore, run_id: str) -> RunView:
        run = kb.run(run_id)
        candidates = kb.candidates(run_id)
        return cls(
            run=run,
            baseline=baseline_engine(kb, run),
            candidates=candidates,
            verdicts={v.candidate_id: v for v in kb.verdicts(run_id)},
            kept=kb.kept_engines(run_id),
        )

    def _iteration_of(self, engine_id: str) -> int:
        return next(c.iteration for c in self.candidates if c.id == engine_id)

    def parent_for(self, iteration: int) -> ParentEngine:
        """The fastest engine kept before `iteration` (chained frames/s speedup) among those with no kept child,
        else the run's baseline. A kept child beat its parent, on frames/s or on time to first audio with frames/s
        held: a TTFA win's chained figure may sit a little under its parent's, and it must still come after it."""
        earlier = [k for k in self.kept if self._iteration_of(k.id) < iteration]
        if not earlier:
            return self.baseline
        superseded = {k.parent_id for k in earlier}
        best = max((k for k in earlier if k.id not in superseded), key=lambda k: k.speedup_vs_reference)
        return ParentEngine(best.id, best.git_commit, best.figures, best.speedup_vs_reference)

    def best(self) -> ParentEngine:
        return self.parent_for(iteration=10**9)

    def slots(self, iteration: int) -> dict[int, CandidateRecord]:
        return {c.slot: c for c in self.candidates if c.iteration == iteration}

    def skipped(self, candidate_id: str) -> bool:
        verdict = self.verdicts.get(candidate_id)
        return verdict is not None and verdict.status == SKIPPED

    def unevaluated(self, iteration: int) -> list[CandidateRecord]:
        return [c for c in self.candidates if c.iteration == iteration and c.state is not CandidateState.DONE]

    def current_iteration(self, num_slots: int) -> int:
        """The first iteration with an empty slot or an unevaluated candidate; the next one if all are done."""
        last = max((c.iteration for c in self.candidates), default=0)
        if last and (len(self.slots(last)) < num_slots or self.unevaluated(last)):
            return last
        return last + 1

    def spend(self, session_wall_s: float) -> Spend:
        started = max((c.iteration for c in self.candidates), default=0)
        device_s = sum(v.eval_seconds for v in self.verdicts.values())
        return Spend(iterations=started, wall_s=self.run.elapsed_s + session_wall_s, device_s=device_s,
                     dollars=self.run.spent_usd)

    def speedup_vs_baseline(self, engine: ParentEngine | KeptEngine) -> float:
        return engine.speedup_vs_reference / self.baseline.speedup_vs_reference


def baseline_engine(kb: KnowledgeStore, run: RunRecord) -> ParentEngine:
    if run.baseline_id == REFERENCE_ID:
        return ParentEngine(REFERENCE_ID, run.baseline_commit, run.baseline_figures, 1.0)
    kept = kb.kept_engine(run.baseline_id)
    figures = run.baseline_figures if run.baseline_figures.frames_per_s is not None else kept.figures
    return ParentEngine(kept.id, run.baseline_commit, figures, kept.speedup_vs_reference)


def lineage_transforms(kb: KnowledgeStore, engine_id: str) -> list[str]:
    """Transforms applied along the kept-engine chain from the reference to `engine_id`, oldest first, each once
    (a retune or renewal names a transform the chain already has)."""
    transforms: list[str] = []
    while engine_id != REFERENCE_ID:
        candidate = kb.candidate(engine_id)
        transforms = json.loads(candidate.proposal_json).get("transforms", []) + transforms
        engine_id = candidate.parent_id
    return list(dict.fromkeys(transforms))


def secret_seed(run: RunRecord, candidate: str) -> int:
    """Per-candidate held-out seed, derived from the run's secret: stable across resumes, unknown to agents."""
    digest = hashlib.sha256(f"{run.secret}:{candidate}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1
