"""The Engine contract: what every engine (the reference in `reference_runtime/model/`, or a candidate
directory forked from it) implements, and what the evaluator calls.

A candidate directory is a Python package whose `__init__.py` (or `engine.py`) defines

    build_engine(config: Drama3Config, weights: Weights, device: torch.device,
                 codec_device: torch.device | None = None) -> Engine

`codec_device` places the codec (decode_audio, the audio of generate/stream) on a second device, e.g. "cuda:1"
while generation runs on "cuda:0" (targets with `hardware.codec_gpu`); None means `device`. Codes should reach it
device to device (see model/placement.py); audio is returned on CPU either way. The evaluator passes it only when
the target sets codec_gpu.

`weights` is the HF-layout tensor dict produced by `reference_runtime.weights` (seeded random init or a
real checkpoint); an engine may re-layout, fuse or quantise it at build time, never change its values
beyond the precision the target allows.

Rows: every sequence position is a row of 11 int64: [main token id, code0, ..., code9]. Text rows carry
the token id and zeros; audio rows carry main = semantic_begin + code0 and the 10 codes.

Per-frame protocol (one request at a time per engine):
    step = engine.prefill(prompt_rows, sampling, seed)   # fills every cache, predicts frame 0
    step = engine.decode_frame()                           # appends the last frame, predicts the next
    ...                                                    # until step.is_eos or the frame budget
Passing `force=frame_row` to either call makes the engine use that frame instead of sampling
(teacher forcing): the logits it returns are then the predictions conditioned on the forced history.
Logits returned in a FrameStep may alias engine buffers; they are valid until the next call.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from .config import Drama3Config

Weights = dict[str, torch.Tensor]
ROW_WIDTH = 11  # main token + 10 codebooks


def frame_codes(frames: torch.Tensor) -> torch.Tensor:
    """Frames (n, ROW_WIDTH) -> the codec's input codes (10, n), contiguous."""
    return frames[:, 1:].T.contiguous()


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Main-token draw (temperature/top-p/top-k, keeping the top-p crossing token) with the RAS guard;
    codes 1..9 are drawn with top-k clamped to code_top_k, top-p, the crossing token dropped."""

    temperature: float = 1.0
    top_p: float = 0.9
    top_k: int = 0  # 0 = unlimited
    ras_window: int = 16
    ras_temperature: float = 1.0
    ras_top_p: float = 0.95
    ras_top_k: int = 30
    code_temperature: float = 1.0
    code_top_p: float = 0.9
    code_top_k: int = 30

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"invalid sampling params {self}: need temperature >= 0, 0 < top_p <= 1, top_k >= 0")


@dataclass(frozen=True, slots=True)
class VoiceReference:
    """A voice-cloning reference: its transcript (optionally starting with <|speaker:N|>) and codec frames."""

    transcript: str
    codes: torch.Tensor  # (10, num_frames) int64
    speaker: int = 0


@dataclass(frozen=True, slots=True)
class StreamSchedule:
    """When audio chunks are emitted while frames arrive.

    The first chunk closes after `first_chunk_frames` frames (1 = the seed's setting), later chunks at
    `window_ends` then every `window_stride` frames (SGLang-Omni: 10, 20, 32, 64, then every 64), and at the
    end. Each chunk's audio is decoded with up to `overlap_frames` frames of left context; None means the
    whole history, which makes the streamed audio equal the non-streaming waveform exactly.
    """

    first_chunk_frames: int = 1
    window_ends: tuple[int, ...] = (10, 20, 32, 64)
    window_stride: int = 64
    overlap_frames: int | None = None

    def chunk_ends(self, num_frames: int) -> list[int]:
        ends = [min(self.first_chunk_frames, num_frames)]
        for e in self.window_ends:
            if ends[-1] < e < num_frames:
                ends.append(e)
        nxt = max(ends[-1], self.window_ends[-1] if self.window_ends else ends[-1]) + self.window_stride
        while nxt < num_frames:
            if nxt > ends[-1]:
                ends.append(nxt)
            nxt += self.window_stride
        if ends[-1] < num_frames:
            ends.append(num_frames)
        return ends


SGLANG_SCHEDULE = StreamSchedule(first_chunk_frames=10, overlap_frames=32)


@dataclass(frozen=True, slots=True)
class TTSRequest:
    text: str
    references: tuple[VoiceReference, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    max_frames: int = 2048
    ignore_eos: bool = False  # benchmarks fix the work: generate exactly max_frames frames


@dataclass(slots=True)
class FrameStep:
    frame: torch.Tensor  # (11,) int64 on the engine's device: [main, code0..code9]
    main_logits: torch.Tensor  # (1 + codebook_size,) float32 over [EOS, semantic 0..codebook_size-1]
    code_logits: torch.Tensor  # (num_codebooks - 1, tower.head_size) float32, codes 1..9
    # An EOS frame has frame[0] == config.eos_token_id and zero codes; it still runs every layer.


@dataclass(frozen=True, slots=True)
class AudioChunk:
    audio: torch.Tensor  # (samples,) float32 on CPU, 44.1 kHz mono in [-1, 1]
    frame_start: int
    frame_end: int
    # (frame_end - frame_start, 11) int64 on CPU: the frames this chunk's audio decodes. The evaluator
    # audits a timed stream by teacher-forcing the oracle on them, so every engine must fill it.
    frames: torch.Tensor | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    frames: torch.Tensor  # (num_frames, 11) int64 on CPU, EOS frame excluded
    audio: torch.Tensor  # (num_frames * 2048,) float32 on CPU


@runtime_checkable
class Engine(Protocol):
    config: Drama3Config
    device: torch.device

    def prefill(self, rows: torch.Tensor, sampling: SamplingParams, seed: int,
                force: torch.Tensor | None = None) -> FrameStep:
        """Reset, run the backbone and the teacher-forced tower over the prompt rows (R, 11), predict frame 0."""

    def decode_frame(self, force: torch.Tensor | None = None) -> FrameStep:
        """Append the last predicted (or forced) frame and predict the next one."""

    def decode_audio(self, codes: torch.Tensor) -> torch.Tensor:
        """Codec: (10, n) int64 codes -> (n * 2048,) float32 waveform (on CPU)."""

    def generate(self, request: TTSRequest) -> Generation:
        """Whole utterance, non-streaming."""

    def stream(self, request: TTSRequest, schedule: StreamSchedule) -> Iterator[AudioChunk]:
        """Audio chunks as frames arrive; their concatenation is the utterance's waveform."""
