"""Typed rows of the knowledge base: runs, candidates, verdicts, kept engines, lessons.

The store speaks only these records; verdict details travel as the evaluator's JSON so the knowledge base
does not import the evaluator.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

REFERENCE_ID = "reference"  # the parent id of candidates forked from the reference engine


class CandidateState(str, Enum):
    PROPOSED = "proposed"  # committed to the engines repo (or rejected at edit time), not yet evaluated
    EVALUATING = "evaluating"
    DONE = "done"  # a verdict is recorded


class RunState(str, Enum):
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class EngineKey:
    """What a kept engine is valid for: the architecture, the model config, the hardware and the stack."""

    architecture: str  # sorted feature list, e.g. "codebook_mtp,dac_codec,fp8_moe,gated_attention,gated_deltanet"
    model_config: str  # "drama3" | "drama3-tiny"
    device: str  # "cpu" | "cuda"
    gpu: str  # "" on CPU
    torch_version: str
    triton_version: str  # "" when triton is not installed
    cuda_version: str  # "" on CPU builds

    @property
    def software(self) -> str:
        return f"torch {self.torch_version}, triton {self.triton_version or '-'}, CUDA {self.cuda_version or '-'}"

    @property
    def hardware(self) -> str:
        return f"{self.device}:{self.gpu}" if self.gpu else self.device


@dataclass(frozen=True, slots=True)
class Figures:
    """Median benchmark figures of an engine, and its frames/s ratio against the engine it was compared to."""

    frames_per_s: float | None = None
    ttfa_ms: float | None = None
    rtf: float | None = None
    speedup: float | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    target_name: str
    target_json: str
    baseline_request: str  # what the target asked for: "reference", "best" or a kept engine id
    baseline_id: str  # what it resolved to: REFERENCE_ID or a kept engine id
    baseline_commit: str
    engine_key: EngineKey
    secret: int  # seeds the evaluator's held-out prompts; never shown to agents
    state: RunState = RunState.RUNNING
    stop_reason: str = ""
    calibration_json: str = ""  # the run's A/A noise calibration, as the evaluator returned it
    baseline_figures: Figures = field(default_factory=Figures)
    elapsed_s: float = 0.0  # wall seconds over every session of the run (resumes add up)
    spent_usd: float = 0.0  # the agents' ledger, including calls that produced no candidate
    started_at: str = ""
    finished_at: str = ""


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    id: str
    run_id: str
    iteration: int
    slot: int
    parent_id: str  # REFERENCE_ID or a kept engine id
    parent_commit: str
    agent: str
    title: str
    rationale: str
    proposal_json: str
    git_commit: str  # "" when the edits did not apply
    state: CandidateState
    cost_usd: float = 0.0
    created_at: str = ""


@dataclass(frozen=True, slots=True)
class VerdictRecord:
    candidate_id: str
    status: str  # evaluator Status value, or "edit_error" when the proposal never became an engine
    summary: str
    evidence_json: str  # list of findings
    verdict_json: str  # the evaluator's full Verdict ("" for edit errors)
    figures: Figures
    eval_seconds: float = 0.0
    created_at: str = ""


@dataclass(frozen=True, slots=True)
class HeldVerdict:
    """An evaluator Verdict that waits for its run's A/A calibration (KnowledgeStore.hold_verdict)."""
    candidate_id: str
    verdict_json: str
    eval_seconds: float


@dataclass(frozen=True, slots=True)
class KeptEngine:
    id: str  # the candidate id it was kept from
    run_id: str
    parent_id: str
    git_commit: str
    key: EngineKey
    figures: Figures  # speedup = vs its parent
    speedup_vs_reference: float  # product of speedups along the lineage
    title: str = ""
    created_at: str = ""


@dataclass(frozen=True, slots=True)
class LessonRecord:
    run_id: str
    candidate_id: str
    feature: str
    outcome: str  # "worked" | "promising" (correct, faster, under the noise band) | "failed"
    summary: str
    evidence: str = ""
    architecture: str = ""
    id: int = 0  # assigned by the store
    created_at: str = ""
    verdict: str = ""  # the candidate's verdict status, read from the verdicts table ("" where it has none)
