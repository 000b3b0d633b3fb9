"""The correctness cascade, cheapest first; the first failing stage raises Rejected with located evidence.

Component parity (codec on random codes, prefill logits of a random prompt) -> teacher forcing along frames the
oracle sampled for held-out secret prompts (the gate) -> codec parity on those frames -> free-running agreement
(reported, not gated) -> the candidate's stream equals its own generate. Expected tensors stay in the judge (E8).

A teacher-forced failure is the candidate's unless its baseline, a kept engine, fails the same prompt at least as
badly (compare.no_worse): then the error is the lineage's, in code the candidate did not change (a prefill path
that a decode-kernel candidate inherits, say), and the candidate passes that prompt with a note naming it.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from reference_runtime.api import ROW_WIDTH, StreamSchedule, TTSRequest, frame_codes
from reference_runtime.config import Drama3Config, get_config
from reference_runtime.prompt import build_rows
from reference_runtime.tokenizer import load_tokenizer
from targets.schema import Target

from .channel import describe, tensor_or_none
from .compare import Logits, LogitStats, check_logits, check_waveform, no_worse
from .inputs import held_out_requests, prompt_label, random_codes, random_frame, sentence
from .sandbox import Deadline, Pool, Worker
from .streams import check_stream, stream_audio, stream_once, stream_schedule
from .verdict import Evidence, Rejected, Status

AUDIBLE_FRACTION = 0.1  # a chunk is audible when its RMS is at least this share of the oracle's typical RMS
CODEC_PARITY_FRAMES = (2, 12)


@dataclass(frozen=True, slots=True)
class AudioLevel:
    """The oracle's typical loudness, the yardstick for audible first chunks and silence (E23, E24)."""

    rms: float
    silence_ratio: float  # share of 2048-sample frames below the audible floor

    @property
    def floor(self) -> float:
        return AUDIBLE_FRACTION * self.rms

    @classmethod
    def of(cls, audio: torch.Tensor, frame_samples: int) -> AudioLevel:
        rms = float(audio.pow(2).mean().sqrt())
        return cls(rms=rms, silence_ratio=silence_ratio(audio, AUDIBLE_FRACTION * rms, frame_samples))


def silence_ratio(audio: torch.Tensor, floor: float, frame_samples: int) -> float:
    frames = audio[: audio.numel() // frame_samples * frame_samples].view(-1, frame_samples)
    return float((frames.pow(2).mean(dim=1).sqrt() < floor).float().mean()) if frames.numel() else 1.0


@dataclass(frozen=True, slots=True)
class CorrectnessReport:
    free_running: list[int]
    stats: list[LogitStats]
    level: AudioLevel
    inherited: list[Evidence] = field(default_factory=list)  # teacher-forced failures the baseline shares

    def summary(self, logit_atol: float) -> Evidence:
        """How close the candidate came, for a verdict that passed the gate."""
        err = max(s.max_abs_err for s in self.stats)
        return Evidence(check="teacher_forced", value=err, limit=logit_atol, message=(
            f"passed on {len(self.stats)} held-out prompts: max |logit error| {err:.2e}, top-1 agreement >= "
            f"{min(s.top1 for s in self.stats):.3f}, top-5 >= {min(s.top5 for s in self.stats):.3f}"))


def stream_check_frames(forced_frames: int, benchmark_frames: int, schedule: StreamSchedule) -> int:
    """How long the candidate's stream-equals-generate check runs: past the schedule's last growing window (up to a
    timed trial's length), so that every window shape's codec work runs beside later frames at least once. Work on
    a second CUDA stream that races the frames' (a shared buffer or cuBLAS workspace) shows only there: session 39
    saw a stream part from generate at frame 21, past the 8 frames the gate forces."""
    growing = (schedule.window_ends[-1] if schedule.window_ends else schedule.first_chunk_frames) + 1
    return max(forced_frames, min(benchmark_frames, growing))


class Cascade:
    def __init__(self, pool: Pool, oracle: Worker, candidate: Worker, target: Target, rng: random.Random,
                 baseline: Callable[[], Worker] | None = None):
        """`baseline`: the baseline engine's worker, started on first call; None when the baseline is the
        reference (whose failures are never inherited)."""
        self.pool, self.oracle, self.candidate, self.rng = pool, oracle, candidate, rng
        self.baseline = baseline
        self.inherited: list[Evidence] = []
        self.config: Drama3Config = get_config(target.model.config)
        self.tol = target.tolerances
        self.schedule = stream_schedule(target.benchmark)
        self.stream_frames = stream_check_frames(self.tol.frames, target.benchmark.frames, self.schedule)
        self.tokenizer = load_tokenizer(self.config)

    def run(self, deadline: Deadline) -> CorrectnessReport:
        self.component_parity(deadline)
        requests = held_out_requests(self.config, self.rng, self.tol.prompts, self.tol.frames)
        labels = [prompt_label(i, r) for i, r in enumerate(requests)]
        oracle_runs = [self._call(self.oracle, "generate", deadline, "generation", request=r) for r in requests]
        stats = [self.teacher_forced(label, r, g["frames"], deadline)
                 for label, r, g in zip(labels, requests, oracle_runs)]
        for label, g in zip(labels, oracle_runs):
            self.codec_parity(label, frame_codes(g["frames"]), g["audio"], deadline)
        free_running = [self.free_running_and_stream(label, r, g["frames"], deadline)
                        for label, r, g in zip(labels, requests, oracle_runs)]
        level = AudioLevel.of(torch.cat([g["audio"] for g in oracle_runs]), self.config.codec.frame_samples)
        return CorrectnessReport(free_running=free_running, stats=stats, level=level, inherited=self.inherited)

    def component_parity(self, deadline: Deadline) -> None:
        codes = random_codes(self.config, self.rng, self.rng.randint(*CODEC_PARITY_FRAMES))
        ref = self._call(self.oracle, "decode_audio", deadline, "audio", codes=codes)["audio"]
        self.codec_parity("random codes", codes, ref, deadline)
        request = TTSRequest(text=sentence(self.rng, self.rng.randint(1, 12)))
        frame = random_frame(self.config, self.rng)[None]
        self.teacher_forced("random prompt (prefill)", request, frame, deadline, drawn=False)

    def teacher_forced(self, label: str, request: TTSRequest, frames: torch.Tensor, deadline: Deadline,
                       drawn: bool = True) -> LogitStats:
        """`drawn`: the frames were sampled by the oracle, so each token must lie in the candidate's support."""
        rows = build_rows(self.config, request, self.tokenizer)
        seed = self.rng.getrandbits(31)
        ref, cand = (self._logits(w, rows, frames, seed, deadline) for w in (self.oracle, self.candidate))
        sampling = request.sampling if drawn else None
        stats, evidence = check_logits(self.config, label, ref, cand, frames, sampling, self.tol)
        if evidence:
            if stats is None or self.baseline is None:
                raise Rejected(Status.MISMATCH, evidence)
            base = self._logits(self.baseline(), rows, frames, seed, deadline)
            if not no_worse(self.config, ref, cand, base, frames, sampling, self.tol):
                raise Rejected(Status.MISMATCH, evidence)
            self.inherited.append(evidence[0].model_copy(update={"message": (
                f"inherited: {evidence[0].message}; the baseline engine fails this prompt at least as badly "
                "wherever this candidate does, so the error is the lineage's, not this change's")}))
        return stats

    def codec_parity(self, label: str, codes: torch.Tensor, ref_audio: torch.Tensor, deadline: Deadline) -> None:
        evidence = check_waveform("codec", label, ref_audio, self._audio(self.candidate, codes, deadline),
                                  self.tol.waveform_max_abs, self.config.codec.frame_samples)
        if evidence:
            raise Rejected(Status.MISMATCH, evidence)

    def free_running_and_stream(self, label: str, request: TTSRequest, oracle_frames: torch.Tensor,
                                deadline: Deadline) -> int:
        """Frames equal to the oracle's before the first divergence; then the stream must equal generate over
        stream_check_frames, the same seed continued."""
        request = replace(request, max_frames=self.stream_frames)
        gen = self._call(self.candidate, "generate", deadline, "generation", request=request)
        frames, audio = tensor_or_none(gen.get("frames")), tensor_or_none(gen.get("audio"))
        n = request.max_frames
        spf = self.config.codec.frame_samples
        if frames is None or frames.dtype != torch.long or tuple(frames.shape) != (n, ROW_WIDTH) or \
                audio is None or audio.dtype != torch.float32 or tuple(audio.shape) != (n * spf,):
            raise Rejected(Status.MISMATCH, [Evidence(check="generate", prompt=label, message=(
                f"generate returned frames {describe(frames)} and audio {describe(audio)}; expected int64 "
                f"({n}, {ROW_WIDTH}) and float32 ({n * spf},) for max_frames={n}, ignore_eos"))])
        differs = (frames[:len(oracle_frames)] != oracle_frames).any(dim=1)
        agreement = int(differs.nonzero()[0, 0]) if differs.any() else len(oracle_frames)
        run = stream_once(self.pool.use(self.candidate), request, self.schedule, deadline)
        evidence = check_stream(self.config, label, run, self.schedule, n)
        if not evidence and not torch.equal(run.frames, frames):
            f = int((run.frames != frames).any(dim=1).nonzero()[0, 0])
            evidence = [Evidence(check="stream", prompt=label, frame=f,
                                 message="streamed frames differ from generate's with the same seed; if the stream "
                                 "runs work on several CUDA streams at once, they must share no buffer or library "
                                 "workspace (CUDA graphs captured on one stream share its cuBLAS workspace)")]
        if not evidence and self.schedule.overlap_frames is not None:  # chunks decode windows, not the utterance
            whole = self._audio(self.candidate, frame_codes(frames), deadline)
            evidence = check_waveform("generate", label, audio, whole, self.tol.stream_max_abs, spf)
            audio = stream_audio(lambda codes: self._audio(self.candidate, codes, deadline), frames, self.schedule,
                                 spf)
            if not evidence and audio is None:
                evidence = [Evidence(check="stream", prompt=label, message=(
                    "decode_audio returned no float32 waveform for a stream window"))]
        evidence = evidence or check_waveform("stream", label, audio, run.audio, self.tol.stream_max_abs, spf)
        if evidence:
            raise Rejected(Status.MISMATCH, evidence)
        return agreement

    def _logits(self, worker: Worker, rows: torch.Tensor, frames: torch.Tensor, seed: int,
                deadline: Deadline) -> Logits:
        reply = self._call(worker, "teacher_force", deadline, "logits", rows=rows, frames=frames, seed=seed)
        main, codes = tensor_or_none(reply.get("main")), tensor_or_none(reply.get("codes"))
        if main is None or codes is None:
            raise Rejected(Status.MISMATCH, [Evidence(check="teacher_forced", message="logits are not tensors")])
        return Logits(main, codes)

    def _audio(self, worker: Worker, codes: torch.Tensor, deadline: Deadline) -> torch.Tensor | None:
        return tensor_or_none(self._call(worker, "decode_audio", deadline, "audio", codes=codes).get("audio"))

    def _call(self, worker: Worker, op: str, deadline: Deadline, kind: str, **args) -> dict:
        return self.pool.use(worker).call(op, deadline, kind, **args)
