"""The target file (`targets/*.yaml`): what to optimise, on what, judged how, until when.

Validated with pydantic at the boundary: unknown keys are rejected and every error names the file and line.
`load_target(path)` is the one loader.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

Frac = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    config: Literal["drama3", "drama3-tiny"]
    weights: Literal["random"] | str = "random"  # "random" = seeded init; else a checkpoint directory
    weights_seed: int = 0
    reference_runtime: str = "reference_runtime"


class HardwareSpec(_Strict):
    device: Literal["cpu", "cuda"]
    gpu: str | None = None  # e.g. "h200", "b200"; recorded with every kept engine
    gpu_count: PositiveInt = 1
    generation_gpu: int = 0
    codec_gpu: int | None = None  # a second GPU for the codec stage (the seed's 2-GPU setup)
    memory_limit_gib: PositiveFloat | None = None  # host RSS cap per evaluation worker
    # Intra-op (OpenMP) threads of each evaluation worker; None keeps torch's default, one per core. Fix it on
    # a shared CPU: two threads waiting on each other stall whenever a busy neighbour holds one core.
    cpu_threads: PositiveInt | None = None

    @model_validator(mode="after")
    def _gpus_exist(self) -> HardwareSpec:
        for gpu in (self.generation_gpu, self.codec_gpu):
            if gpu is not None and not 0 <= gpu < self.gpu_count:
                raise ValueError(f"GPU index {gpu} is outside gpu_count={self.gpu_count}")
        if self.device == "cpu" and self.codec_gpu is not None:
            raise ValueError("codec_gpu needs device: cuda")
        if self.codec_gpu is not None and self.codec_gpu == self.generation_gpu:
            raise ValueError("codec_gpu must differ from generation_gpu (leave it out to keep the codec on the "
                             "generation GPU)")
        return self


class PromptSpec(_Strict):
    name: str
    text: str
    reference_frames: int = 0  # >0: a voice reference of this many codec frames, drawn from the trial seed
    reference_text: str = ""


class BenchmarkSpec(_Strict):
    prompts: list[PromptSpec]
    frames: PositiveInt = 200  # fixed work per trial (ignore_eos), so RTF cannot be gamed by length
    warm_trials: PositiveInt = 20
    # Where the paired ratios spread over 10% (a noisy host), up to this many warm rounds, so that the verdict rests
    # on enough pairs to decide (evaluator.statistics.RELIABLE_PAIRS); None: 3x warm_trials. benchmark_s still caps it.
    max_warm_trials: PositiveInt | None = None
    warmup_trials: int = 2
    first_chunk_frames: PositiveInt = 1
    # left context each later chunk's codec decode re-runs: None re-decodes the whole history (the streamed audio
    # then equals the whole utterance's decode); SGLang-Omni's Drama 3 streamer uses 32 (docs/drama3_arch.md §2)
    stream_overlap_frames: NonNegativeInt | None = None
    min_speedup: PositiveFloat = 1.03  # lower CI bound on the frames/s ratio, or on the TTFA ratio, must clear this
    max_plausible_speedup: PositiveFloat = 20.0  # above this the verdict is cheat_suspected (manual review)
    confidence: Frac = 0.95

    @model_validator(mode="after")
    def _cap_covers_warm_trials(self) -> BenchmarkSpec:
        if self.max_warm_trials is not None and self.max_warm_trials < self.warm_trials:
            raise ValueError(f"max_warm_trials ({self.max_warm_trials}) is under warm_trials ({self.warm_trials}); "
                             "raise it, or leave it out for 3x warm_trials")
        return self

    @property
    def warm_trials_cap(self) -> int:
        return self.max_warm_trials if self.max_warm_trials is not None else 3 * self.warm_trials


class ToleranceSpec(_Strict):
    """Teacher-forced gates, per the engine dtype; calibrate with reference-vs-reference runs."""

    prompts: PositiveInt = 3  # fresh held-out prompts per evaluation, from a secret seed
    frames: PositiveInt = 24  # teacher-forced frames per prompt
    logit_atol: PositiveFloat = 1e-3
    logit_rtol: PositiveFloat = 1e-3
    top1_agreement: Frac = 0.99
    top5_agreement: Frac = 0.99
    eos_logit_atol: PositiveFloat = 1e-3
    waveform_max_abs: PositiveFloat = 1e-3
    stream_max_abs: PositiveFloat = 1e-3


class StageTimeouts(_Strict):
    build_s: PositiveFloat = 300
    correctness_s: PositiveFloat = 600
    benchmark_s: PositiveFloat = 1200


class AcceptanceSpec(_Strict):
    ttfa_ms: PositiveFloat | None = None  # p50 time to first audible chunk, at most
    frames_per_s: PositiveFloat | None = None  # p50, at least
    rtf: PositiveFloat | None = None  # p50, at most
    speedup: PositiveFloat | None = None  # frames/s vs the baseline, at least


class BudgetSpec(_Strict):
    iterations: PositiveInt = 10
    wall_minutes: PositiveFloat = 60
    gpu_hours: PositiveFloat | None = None
    dollars: PositiveFloat | None = None


class AgentSpec(_Strict):
    provider: Literal["offline", "anthropic", "openai"]
    model: str = "offline"
    count: PositiveInt = 1
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7
    base_url: str | None = None  # OpenAI-compatible local servers (vLLM, llama.cpp, ollama)
    max_tokens: PositiveInt = 8192
    # The model's context window, for small local models: the prompt then fits in it next to two answers (one
    # repair turn), showing the engine files the parent's profile points at first and listing the rest by name.
    context_tokens: PositiveInt | None = None


class Target(_Strict):
    name: str
    model: ModelSpec
    baseline: str = "reference"  # "reference", a kept engine id, or "best" (best kept for this architecture)
    hardware: HardwareSpec
    benchmark: BenchmarkSpec
    tolerances: ToleranceSpec = ToleranceSpec()
    timeouts: StageTimeouts = StageTimeouts()
    acceptance: AcceptanceSpec = AcceptanceSpec()
    budget: BudgetSpec = BudgetSpec()
    agents: list[AgentSpec] = [AgentSpec(provider="offline")]
    candidates_per_iteration: PositiveInt = 2
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    kb_path: str | None = None  # SQLite file; default $SWARM_HOME/kb.sqlite


class TargetError(ValueError):
    """A target file that cannot be used; the message names the file, line and fix."""


def with_budget(target: Target, **changes: float | None) -> Target:
    """`target` with the given budget fields replaced (None leaves one alone): the command line's overrides, e.g.
    to continue a run within another time-limited GPU lease without editing the target file."""
    from pydantic import ValidationError

    given = {k: v for k, v in changes.items() if v is not None}
    if not given:
        return target
    try:
        budget = BudgetSpec.model_validate(target.budget.model_dump() | given)
    except ValidationError as e:
        raise TargetError("; ".join(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}"
                                    for err in e.errors())) from e
    return target.model_copy(update={"budget": budget})


def with_agents(target: Target, spec: str | None) -> Target:
    """`target` with its agents replaced by `spec` (None leaves them alone): comma-separated
    `provider[/model][:count]`, e.g. "offline" or "offline:2,anthropic/claude-sonnet-4-5". It runs a target written
    for API agents on a machine without keys or network (a lent GPU) without editing the file; base_url and the
    other per-agent fields stay in YAML."""
    from pydantic import ValidationError

    if spec is None:
        return target
    agents = []
    for entry in (e.strip() for e in spec.split(",")):
        what, _, count = entry.partition(":")
        provider, _, model = what.partition("/")
        fields = {"provider": provider} | ({"model": model} if model else {}) | ({"count": count} if count else {})
        try:
            agents.append(AgentSpec.model_validate(fields))
        except ValidationError as e:
            problems = "; ".join(f"{err['loc'][0]}: {err['msg']}" for err in e.errors())
            raise TargetError(f"--agents {entry!r}: {problems} (write provider[/model][:count], e.g. offline:2 or "
                              "anthropic/claude-sonnet-4-5)") from e
    return target.model_copy(update={"agents": agents})


def load_target(path: str | Path) -> Target:
    import yaml

    from .yaml_lines import locate

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TargetError(f"{path}: cannot read target file ({e.strerror})") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise TargetError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from e
    if not isinstance(data, dict):
        raise TargetError(f"{path}: a target must be a YAML mapping with keys {sorted(Target.model_fields)}")
    from pydantic import ValidationError

    try:
        return Target.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = tuple(err["loc"])
            line = locate(text, loc)
            dotted = ".".join(str(p) for p in loc) or "(top level)"
            hint = " (unknown key: remove it or fix its spelling)" if err["type"] == "extra_forbidden" else ""
            lines.append(f"{path}:{line}: {dotted}: {err['msg']}{hint}")
        raise TargetError("invalid target\n" + "\n".join(lines)) from e
