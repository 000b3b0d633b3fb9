"""The evaluator's typed answer: a Verdict with a status, metrics, evidence and the candidate's log tail."""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class Status(str, Enum):
    PASS = "pass"  # correct and faster than the baseline beyond noise
    BUILD_ERROR = "build_error"  # import / build_engine failed or the API is not implemented
    CRASH = "crash"  # Python exception, segfault, sys.exit, killed by a signal
    TIMEOUT = "timeout"  # a stage ran past its limit
    OOM = "oom"  # host or device memory exhausted
    CUDA_FAULT = "cuda_fault"  # illegal address, device assert, ... (the worker/GPU slot is recycled)
    MISMATCH = "mismatch"  # teacher-forced logits, codec waveform or streaming disagree with the reference
    CHEAT_SUSPECTED = "cheat_suspected"  # tampering, caching, lazy/aliased outputs, implausible timing, ...
    SLOWER = "slower"  # correct, but not faster beyond noise
    NOISY = "noisy"  # correct, but the timing spread is too large to decide
    CORRECT = "correct"  # correct; speed not measured (asked for correctness only: a kept engine's re-verification)

    @property
    def is_correct(self) -> bool:
        return self in (Status.PASS, Status.SLOWER, Status.NOISY, Status.CORRECT)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Evidence(_Model):
    """One finding, located as precisely as the check allows."""

    check: str  # e.g. "teacher_forced", "codec", "stream", "timing", "sandbox"
    message: str
    prompt: str | None = None
    frame: int | None = None
    codebook: int | None = None  # 0 = main token (EOS + semantic), 1..9 = residual codes
    value: float | None = None
    limit: float | None = None


class PromptFigures(_Model):
    """Benchmark figures for one prompt, over the warm trials."""

    prompt: str
    trials: int
    ttfa_ms_p50: float
    ttfa_ms_p95: float
    frames_per_s_p50: float
    frames_per_s_p95: float
    rtf_p50: float
    rtf_p95: float


class BenchResult(_Model):
    engine: str  # "candidate" or "baseline"
    prompts: list[PromptFigures]
    peak_memory_gib: float | None = None

    def median(self, field: str) -> float:
        values = sorted(getattr(p, field) for p in self.prompts)
        return values[len(values) // 2]


class FirstAudio(_Model):
    """Time to first audio on the same pairs: each pair's baseline TTFA / candidate TTFA (above 1: heard sooner)."""

    speedup: float  # median paired ratio
    ci_low: float
    ci_high: float
    # the lower CI bound must clear this: the target's min_speedup, raised by the A/A band of TTFA; None when the
    # run's calibration predates that band, so no TTFA win can be told from noise
    threshold: float | None
    spread: float  # the largest relative IQR of the paired ratios on one prompt

    @property
    def sooner(self) -> bool:
        return self.threshold is not None and self.ci_low > self.threshold

    @property
    def later(self) -> bool:
        """Heard later beyond noise: the whole CI under the threshold's inverse."""
        return self.threshold is not None and self.ci_high < 1 / self.threshold

    def describe(self) -> str:
        bar = "no A/A band of TTFA" if self.threshold is None else f"threshold {self.threshold:.3f}"
        return f"TTFA speedup {self.speedup:.3f} (CI {self.ci_low:.3f}..{self.ci_high:.3f}, {bar})"


class Comparison(_Model):
    """Candidate vs baseline, measured interleaved (ABAB) in one run. The speedup is of frames/s; `first_audio`
    can win on its own when frames/s holds."""

    speedup: float  # frames/s ratio candidate / baseline (median over paired trials)
    ci_low: float
    ci_high: float
    threshold: float  # the lower CI bound must clear this (target min_speedup, raised by A/A noise)
    ttfa_ratio: float  # candidate TTFA / baseline TTFA
    spread: float = 0.0  # the largest relative IQR of the paired ratios on one prompt
    pairs: int = 0  # paired trials the CI rests on (0 in verdicts stored before it was recorded: too few)
    calibrated: bool = True  # the threshold includes an A/A band; without one no comparison is a win
    first_audio: FirstAudio | None = None  # None in verdicts stored before TTFA was compared pair by pair

    @property
    def awaits_calibration(self) -> bool:
        """A win by the target's min_speedup alone, which only an A/A band can confirm."""
        return not self.calibrated and (self.ci_low > self.threshold or self.won_on_first_audio)

    def bar(self) -> str:
        """The CI and threshold the decision rests on: TTFA's for a first-audio win, else frames/s'."""
        if self.won_on_first_audio:
            t = self.first_audio
            return f"TTFA {t.ci_low:.3f}-{t.ci_high:.3f} > {t.threshold:.3f}"
        return f"{self.ci_low:.3f}-{self.ci_high:.3f} > {self.threshold:.3f}"

    @property
    def won_on_first_audio(self) -> bool:
        """Its CI clears the TTFA threshold while the frames/s CI does not clear the frames/s one."""
        return self.first_audio is not None and self.first_audio.sooner and not self.ci_low > self.threshold


PROFILE_ROWS = 15  # the most rows a profile may carry
PROFILE_NAME_CHARS = 100
# Reported by the engine's own process, so bounded and finite here: they reach the knowledge base and the prompts.
_PerFrame = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ProfileRow(_Model):
    name: Annotated[str, StringConstraints(max_length=PROFILE_NAME_CHARS, pattern=r"^[^\r\n]*$")]  # op or kernel
    ms_per_frame: _PerFrame  # self time
    calls_per_frame: _PerFrame


class Profile(_Model):
    """Where one streamed request's time went, by torch.profiler in the engine's process: CUDA kernels by self
    device time, or (CPU engines) ops by self CPU time. For the agents only; no decision reads it."""

    source: Literal["cuda", "cpu"]
    frames: Annotated[int, Field(ge=1)]
    rows: Annotated[list[ProfileRow], Field(max_length=PROFILE_ROWS)]  # largest self time first
    total_ms_per_frame: _PerFrame  # over all kernels / ops, not only the rows
    total_calls_per_frame: _PerFrame


class Verdict(_Model):
    status: Status
    candidate: str
    baseline: str
    summary: str  # one line a human reads first
    evidence: list[Evidence] = []
    candidate_bench: BenchResult | None = None
    baseline_bench: BenchResult | None = None
    comparison: Comparison | None = None
    free_running_agreement_frames: list[int] = []  # per prompt: frames equal before first divergence
    stage_seconds: dict[str, float] = {}
    # per engine (candidate, oracle, baseline): seconds spent answering the judge, builds excluded; where an
    # evaluation's time goes across its stages (the eager oracle's share, say)
    engine_seconds: dict[str, float] = {}
    log_tail: str = ""
    hardware: str = ""
    software: str = ""  # torch / triton / CUDA versions
    judge: str = ""  # version.judge_version() of the evaluator that decided it
    candidate_profile: Profile | None = None  # informational (after a correct benchmark), never decides
    baseline_profile: Profile | None = None


class Rejected(Exception):
    """A check's final word on a candidate (mismatch, suspected cheating, ...), raised inside the cascade."""

    def __init__(self, status: Status, evidence: list[Evidence]):
        super().__init__(f"{status.value}: {evidence[0].message if evidence else ''}")
        self.status, self.evidence = status, evidence


class EvaluatorError(RuntimeError):
    """The harness itself failed (the oracle or a trusted baseline broke): never blamed on the candidate."""
