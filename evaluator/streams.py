"""One streamed request as the judge sees it: chunks with their arrival times on the judge's clock, then checks
that the chunking follows the schedule and the work is what was asked for (E5, E24).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from reference_runtime.api import ROW_WIDTH, StreamSchedule, TTSRequest, frame_codes
from reference_runtime.config import Drama3Config
from targets.schema import BenchmarkSpec

from .channel import describe, tensor_or_none
from .sandbox import Deadline, Worker
from .verdict import Evidence


@dataclass(frozen=True, slots=True)
class Chunk:
    audio: torch.Tensor
    frame_start: int
    frame_end: int
    frames: torch.Tensor | None
    arrived: float  # judge's time.perf_counter()


@dataclass(frozen=True, slots=True)
class StreamRun:
    sent: float  # judge's clock when the request went out
    chunks: list[Chunk]
    worker_s: float  # what the worker says it took (cross-checked, never trusted)
    device_s: float | None  # CUDA-event time, CUDA only
    peak_gib: float | None = None  # the worker's peak GPU memory so far, CUDA only

    @property
    def audio(self) -> torch.Tensor:
        return torch.cat([c.audio for c in self.chunks]) if self.chunks else torch.zeros(0)

    @property
    def frames(self) -> torch.Tensor | None:
        if not self.chunks or any(c.frames is None for c in self.chunks):
            return None
        return torch.cat([c.frames for c in self.chunks])

    @property
    def total_s(self) -> float:
        return self.chunks[-1].arrived - self.sent if self.chunks else float("nan")


def stream_schedule(spec: BenchmarkSpec) -> StreamSchedule:
    """The chunking a target's streams follow, in correctness checks and benchmark trials alike."""
    return StreamSchedule(first_chunk_frames=spec.first_chunk_frames, overlap_frames=spec.stream_overlap_frames)


def stream_audio(decode: Callable[[torch.Tensor], torch.Tensor | None], frames: torch.Tensor,
                 schedule: StreamSchedule, frame_samples: int) -> torch.Tensor | None:
    """The audio an honest stream of `frames` (n, 11) carries under `schedule`, from `decode` (codes (10, m) ->
    waveform): the whole decode when each chunk re-decodes the whole history, else each chunk's window (its frames
    and up to overlap_frames before them) decoded and cut to the chunk. None where a decode gave no 1-D waveform."""
    codes = frame_codes(frames)
    if schedule.overlap_frames is None:
        return decode(codes)
    parts, start = [], 0
    for end in schedule.chunk_ends(frames.shape[0]):
        first = max(0, start - schedule.overlap_frames)
        audio = decode(codes[:, first:end].contiguous())
        if audio is None or audio.dim() != 1:
            return None
        parts.append(audio[(start - first) * frame_samples:])
        start = end
    return torch.cat(parts)


def stream_once(worker: Worker, request: TTSRequest, schedule: StreamSchedule, deadline: Deadline) -> StreamRun:
    chunks, sent, done = [], 0.0, {}
    for message, at in worker.stream(deadline, request=request, schedule=schedule):
        if message["kind"] == "sent":
            sent = at
        elif message["kind"] == "chunk":
            chunks.append(Chunk(tensor_or_none(message.get("audio")), _int(message.get("frame_start")),
                                _int(message.get("frame_end")), tensor_or_none(message.get("frames")), at))
        else:
            done = message
    device_s, peak = done.get("device_s"), done.get("peak_gib")
    return StreamRun(sent=sent, chunks=chunks, worker_s=_float(done.get("worker_s")),
                     device_s=_float(device_s) if device_s is not None else None,
                     peak_gib=_float(peak) if peak is not None else None)


def check_stream(config: Drama3Config, prompt: str, run: StreamRun, schedule: StreamSchedule,
                 num_frames: int) -> list[Evidence]:
    """Chunk ends follow `schedule`, chunks tile the frames, each carries its frames and 2048 samples per frame."""
    spf = config.codec.frame_samples
    ends = [c.frame_end for c in run.chunks]
    if ends != schedule.chunk_ends(num_frames):
        return [Evidence(check="stream", prompt=prompt, message=(
            f"chunks end at frames {ends}, the schedule says {schedule.chunk_ends(num_frames)}"))]
    start = 0
    for c in run.chunks:
        where = f"chunk [{c.frame_start}, {c.frame_end})"
        if c.frame_start != start:
            return [Evidence(check="stream", prompt=prompt, frame=start,
                             message=f"{where} does not start where the previous chunk ended ({start})")]
        n = c.frame_end - c.frame_start
        if c.audio is None or c.audio.dtype != torch.float32 or tuple(c.audio.shape) != (n * spf,):
            return [Evidence(check="stream", prompt=prompt, frame=start,
                             message=f"{where} audio is {describe(c.audio)}, expected float32 ({n * spf},)")]
        if not torch.isfinite(c.audio).all():
            return [Evidence(check="stream", prompt=prompt, frame=start, message=f"{where} has non-finite audio")]
        if c.frames is None or c.frames.dtype != torch.long or tuple(c.frames.shape) != (n, ROW_WIDTH):
            return [Evidence(check="stream", prompt=prompt, frame=start, message=(
                f"{where} frames are {describe(c.frames)}, expected int64 ({n}, {ROW_WIDTH}): every AudioChunk must "
                "carry the frames it decodes (reference_runtime/api.py AudioChunk.frames)"))]
        start = c.frame_end
    return []


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1


def _float(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else float("nan")
