"""What agents exchange with the loop: the context a proposal is made from, and the proposal itself."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from knowledge_base import REFERENCE_ID


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileEdit(_Model):
    """One SEARCH/REPLACE block over a named engine file; `search == ""` creates a new file."""

    path: str  # relative to the engine package root, e.g. "moe.py"
    search: str
    replace: str


def parent_label(parent_id: str, model_config: str, device: str, gpu: str | None) -> str:
    """How lessons name the parent a candidate was measured on. Kept engines have unique ids; every target's
    reference is REFERENCE_ID, so it carries the model config and hardware: a CPU demo's timing of a transform on
    the tiny reference says nothing about the same transform on the full model's reference on a GPU."""
    return parent_id if parent_id != REFERENCE_ID else f"{parent_id} ({model_config}, {gpu or device})"


class Lesson(_Model):
    feature: str  # architecture feature it concerns: "fp8_moe", "linear_attention", "codebook_mtp", "codec", ...
    outcome: str  # "worked" | "promising" (correct, faster, under the noise band) | "failed"
    summary: str
    evidence: str = ""
    verdict: str = ""  # the evaluator's status ("slower", "mismatch", ...); "slower" and "noisy" were correct


class ProposalContext(_Model):
    target_name: str
    model_config_name: str
    device: str  # "cpu" | "cuda"
    gpu: str | None
    parent_id: str
    parent_files: dict[str, str]  # path -> source of the parent engine package
    parent_figures: str  # benchmark / profile figures of the parent, human-readable
    # the parent's profile as data: kernel (or CPU op) name -> self ms per streamed frame, its largest rows
    parent_kernels: dict[str, float] = {}
    acceptance: str  # the acceptance criteria still unmet, human-readable
    unmet_aims: list[str] = []  # the AcceptanceSpec fields of those criteria (swarm.outcome.unmet_aims)
    failures: list[str] = []  # evidence of recent failing verdicts (and edit errors) to avoid repeating
    lessons: list[Lesson] = []
    applied_transforms: list[str] = []  # transforms already in the parent's lineage
    measured_on_parent: list[str] = []  # titles of this run's candidates on this parent so far
    iteration: int = 0
    slot: int = 0  # which of the parallel proposals this is (agents diversify on it)

    @property
    def parent_label(self) -> str:
        return parent_label(self.parent_id, self.model_config_name, self.device, self.gpu)


class Proposal(_Model):
    agent: str
    title: str
    rationale: str
    edits: list[FileEdit]
    transforms: list[str] = []  # names of knowledge-base transforms this proposal applies (offline proposer)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
