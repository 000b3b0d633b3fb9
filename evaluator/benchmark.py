"""Interleaved A/B streaming benchmark on the judge's clock, then audits of random timed candidate trials.

Fixed work (ignore_eos, benchmark.frames; E24); fresh inputs every trial, warmup or timed, shared by the pair (E9,
E11); ABAB/BABA order with the idle engine frozen; times = request sent -> chunk arrived; TTFA = first audible
chunk (E23); each trial must tile the schedule, match the oracle's loudness (E24) and not repeat earlier audio or
frames (E9). Audit: the oracle teacher-forces a timed trial's frames (each token in its support, audio = their decode).
"""
from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.prompt import build_rows
from reference_runtime.tokenizer import load_tokenizer
from targets.schema import Target

from .compare import Logits, check_waveform, invalid_frame, outside_support
from .correctness import AudioLevel, silence_ratio
from .inputs import trial_request
from .sandbox import Deadline, Pool, Worker
from .statistics import Paired, needs_margin, prompt_figures, rel_iqr
from .streams import StreamRun, check_stream, stream_audio, stream_once, stream_schedule
from .verdict import BenchResult, EvaluatorError, Evidence, Rejected, Status

RMS_RATIO = 4.0  # a trial's RMS must be within this factor of the oracle's
SILENCE_SLACK = 0.25  # and its silent-frame share at most this much above the oracle's
CLOCK_SLACK = (0.25, 0.05)  # worker vs judge time may differ by 25% + 50 ms before it is recorded
# Timed candidate trials the oracle audits. Moving the median takes faking over half of them (over three
# quarters to also keep the spread tidy), so k random audits all miss such a cheat with odds under 2^-k.
AUDITED_TRIALS = 4


@dataclass(frozen=True, slots=True)
class Trial:
    engine: str  # "candidate" or "baseline" (in an A/A calibration, two copies of the baseline)
    pair: int  # the two engines' trials of one request share it
    prompt: str
    timed: bool
    request: TTSRequest
    run: StreamRun
    ttfa_s: float
    audio_s: float

    @property
    def frames_per_s(self) -> float:
        return self.request.max_frames / self.run.total_s

    @property
    def rtf(self) -> float:
        return self.run.total_s / self.audio_s


class Benchmark:
    def __init__(self, pool: Pool, baseline: Worker, candidate: Worker, target: Target, rng: random.Random,
                 level: AudioLevel):
        self.pool, self.rng, self.level = pool, rng, level
        self.engines = {"baseline": baseline, "candidate": candidate}
        self.config = get_config(target.model.config)
        self.spec = target.benchmark
        self.schedule = stream_schedule(self.spec)
        self.evidence: list[Evidence] = []
        self._seen: dict[str, set[tuple[str, str]]] = {"audio": set(), "frames": set()}

    def run(self, deadline: Deadline, undecided: Callable[[list[Trial]], bool] | None = None) -> list[Trial]:
        """The warmup and warm rounds; then, while `undecided(trials)` (by default: while the paired ratios spread
        too much to trust on the pairs so far, statistics.needs_margin), more warm rounds up to
        benchmark.max_warm_trials, each only while three rounds' time is left: a noisy host gets a verdict on
        more pairs, not one on too few."""
        undecided = undecided or _spread_too_wide
        trials: list[Trial] = []
        for _ in range(self.spec.warmup_trials):
            trials += self._round(len(trials) // 2, False, deadline)
        started = time.perf_counter()
        for rounds in range(1, self.spec.warm_trials_cap + 1):
            if rounds > self.spec.warm_trials:
                if not undecided(trials):
                    break
                if deadline.at - time.perf_counter() < 3 * (time.perf_counter() - started) / (rounds - 1):
                    break
            trials += self._round(len(trials) // 2, True, deadline)
        return trials

    def _round(self, first_pair: int, timed: bool, deadline: Deadline) -> list[Trial]:
        """One trial pair per prompt, each pair in ABAB/BABA order by its number."""
        trials = []
        for i, prompt in enumerate(self.spec.prompts):
            pair = first_pair + i
            request = trial_request(self.config, prompt, self.rng, self.spec.frames)
            order = ("baseline", "candidate") if pair % 2 == 0 else ("candidate", "baseline")
            trials += [self.trial(name, pair, prompt.name, request, timed, deadline) for name in order]
        return trials

    def trial(self, name: str, pair: int, prompt: str, request: TTSRequest, timed: bool,
              deadline: Deadline) -> Trial:
        run = stream_once(self.pool.use(self.engines[name]), request, self.schedule, deadline)
        evidence = check_stream(self.config, prompt, run, self.schedule, request.max_frames)
        audio = run.audio
        evidence = evidence or self._loudness(prompt, audio)
        if evidence:
            self._reject(name, evidence)
        # frames too: a replay can dither its audio below the waveform tolerance, not its tokens
        digests = {what: (name, hashlib.sha256(t.numpy().tobytes()).hexdigest()) for what, t in
                   (("audio", audio), ("frames", run.frames))}
        repeated = [what for what, d in digests.items() if d in self._seen[what]]
        if repeated:
            self._reject(name, [Evidence(check="benchmark", prompt=prompt, message=(
                f"a trial repeated an earlier trial's {repeated[0]} exactly despite fresh inputs (replayed output?)"))])
        for what, d in digests.items():
            self._seen[what].add(d)
        judge_s = run.total_s
        for clock, claimed in (("worker clock", run.worker_s), ("CUDA events", run.device_s)):
            if claimed is not None and not abs(claimed - judge_s) <= CLOCK_SLACK[0] * judge_s + CLOCK_SLACK[1]:
                self.evidence.append(Evidence(check="timing", prompt=prompt, value=claimed, limit=judge_s, message=(
                    f"{name}: {clock} give {claimed:.3f} s for the stream, the judge measured {judge_s:.3f} s")))
        audible = next((c for c in run.chunks if float(c.audio.pow(2).mean().sqrt()) >= self.level.floor), None)
        ttfa = (audible or run.chunks[-1]).arrived - run.sent
        return Trial(engine=name, pair=pair, prompt=prompt, timed=timed, request=request, run=run, ttfa_s=ttfa,
                     audio_s=audio.numel() / self.config.codec.sample_rate)

    def _loudness(self, prompt: str, audio: torch.Tensor) -> list[Evidence]:
        rms = float(audio.pow(2).mean().sqrt())
        silent = silence_ratio(audio, self.level.floor, self.config.codec.frame_samples)
        if not self.level.rms / RMS_RATIO <= rms <= self.level.rms * RMS_RATIO:
            return [Evidence(check="benchmark", prompt=prompt, value=rms, limit=self.level.rms, message=(
                f"trial audio RMS {rms:.4f} is outside {RMS_RATIO:g}x of the oracle's {self.level.rms:.4f}"))]
        if silent > self.level.silence_ratio + SILENCE_SLACK:
            return [Evidence(check="benchmark", prompt=prompt, value=silent, limit=self.level.silence_ratio, message=(
                f"{silent:.0%} of the trial's frames are silent against the oracle's {self.level.silence_ratio:.0%}"))]
        return []

    def _reject(self, name: str, evidence: list[Evidence]) -> None:
        if name != "candidate":
            raise EvaluatorError(f"the {name} engine failed a benchmark check: {evidence[0].message}")
        raise Rejected(Status.CHEAT_SUSPECTED, evidence)


def audit(pool: Pool, oracle: Worker, trial: Trial, target: Target, deadline: Deadline) -> None:
    """Raise Rejected (cheat_suspected) unless `trial`'s frames are ones the oracle could have sampled and its
    audio is their decode."""
    config = get_config(target.model.config)
    frames = trial.run.frames
    bad = invalid_frame(config, frames)
    if bad is not None:
        raise Rejected(Status.CHEAT_SUSPECTED, [Evidence(check="audit", prompt=trial.prompt, frame=bad,
                                                         message="a streamed frame holds invalid tokens")])
    rows = build_rows(config, trial.request, load_tokenizer(config))
    reply = pool.use(oracle).call("teacher_force", deadline, "logits", rows=rows, frames=frames, seed=0)
    logits = Logits(reply["main"], reply["codes"])
    outside = outside_support(config, logits, frames, trial.request.sampling, target.tolerances)
    if outside.any():
        f, k = (int(i) for i in outside.nonzero()[0])
        raise Rejected(Status.CHEAT_SUSPECTED, [Evidence(check="audit", prompt=trial.prompt, frame=f, codebook=k,
            message="a timed trial emitted a token outside the oracle's sampling support at that step")])
    worker = pool.use(oracle)
    ref_audio = stream_audio(lambda codes: worker.call("decode_audio", deadline, "audio", codes=codes)["audio"],
                             frames, stream_schedule(target.benchmark), config.codec.frame_samples)
    evidence = check_waveform("audit", trial.prompt, ref_audio, trial.run.audio, target.tolerances.waveform_max_abs,
                              config.codec.frame_samples)
    if evidence:  # the streamed audio is not the decode of the streamed frames
        raise Rejected(Status.CHEAT_SUSPECTED, evidence)


def _pairs(trials: list[Trial]) -> list[tuple[Trial, Trial]]:
    """(candidate, baseline) trials of each timed pair (one request, both engines)."""
    pairs: dict[int, dict[str, Trial]] = {}
    for x in trials:
        if x.timed:
            pairs.setdefault(x.pair, {})[x.engine] = x
    return [(p["candidate"], p["baseline"]) for p in pairs.values()]


def throughput_gain(c: Trial, b: Trial) -> float:
    """A pair's candidate / baseline frames/s."""
    return c.frames_per_s / b.frames_per_s


def first_audio_gain(c: Trial, b: Trial) -> float:
    """A pair's baseline / candidate time to first audio: above 1 when the candidate is heard sooner."""
    return b.ttfa_s / c.ttfa_s


def paired(trials: list[Trial], gain: Callable[[Trial, Trial], float] = throughput_gain) -> Paired:
    """Each timed pair's gain, and their spread: the largest relative IQR over the prompts. Ratios, not each
    engine's figures: every trial has a fresh input whose length moves both engines' times together, which is
    not noise."""
    ratios, groups = [], {}
    for c, b in _pairs(trials):
        ratios.append(gain(c, b))
        groups.setdefault(c.prompt, []).append(ratios[-1])
    return Paired(ratios=ratios, spread=max(rel_iqr(v) for v in groups.values()))


def _spread_too_wide(trials: list[Trial]) -> bool:
    frames = paired(trials)
    return needs_margin(frames.spread, len(frames.ratios))


def bench_result(name: str, trials: list[Trial]) -> BenchResult:
    """Per-prompt p50/p95 figures of one engine's timed trials, in prompt order."""
    figures = []
    for p in dict.fromkeys(x.prompt for x in trials):
        mine = [x for x in trials if x.prompt == p]
        figures.append(prompt_figures(p, [x.ttfa_s * 1e3 for x in mine], [x.frames_per_s for x in mine],
                                      [x.rtf for x in mine]))
    peaks = [x.run.peak_gib for x in trials if x.run.peak_gib is not None]
    return BenchResult(engine=name, prompts=figures, peak_memory_gib=max(peaks) if peaks else None)
