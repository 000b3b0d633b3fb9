"""GraphEngine: the reference engine with the decode frame replayed from CUDA graphs (the same code runs eagerly
on CPU, which is how it is tested there).

prefill runs the model eagerly into StaticState's caches, then the predict step (the first frame: lm_head, draw,
tower); decode_frame runs the backbone and predict steps. On CUDA each (kind, attention span bucket, sampling
params) is captured once and replayed. generate/stream keep frames on the device and read them back once per
chunk (or every EOS_CHECK_EVERY frames) instead of once per frame, so an EOS is found a few frames late and the
frames computed after it are dropped.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from reference_runtime.api import (
    ROW_WIDTH,
    AudioChunk,
    FrameStep,
    Generation,
    SamplingParams,
    StreamSchedule,
    TTSRequest,
    Weights,
)
from reference_runtime.config import Drama3Config
from reference_runtime.prompt import build_rows

from .codec import Codec
from .decode_step import FrameProgram
from .decode_weights import decode_weights
from .drama3 import Drama3Model
from .engine import ReferenceEngine
from .graph_capture import capture
from .graph_params import EOS_CHECK_EVERY, FUSE_PROJECTIONS, MIN_SPAN, PREWARM_ROWS
from .static_state import StaticState
from .tower import is_semantic_token


class GraphEngine(ReferenceEngine):
    def __init__(self, config: Drama3Config, model: Drama3Model, codec: Codec, device: torch.device,
                 weights: Weights) -> None:
        super().__init__(config, model, codec, device)
        self.state = StaticState(config, model.backbone.dtype, device)
        self.program = FrameProgram(config, decode_weights(weights, config, device, FUSE_PROJECTIONS), self.state,
                                    model.tower.input_frame_embedding)
        self._graphs: dict[tuple[str, int, SamplingParams], torch.cuda.CUDAGraph] = {}
        self._pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
        self._rows: int | None = None  # rows the backbone has consumed in this request
        self._sampling = SamplingParams()
        self._forcing = False
        if self._pool is not None:
            self._prewarm()

    # ---- per-frame protocol

    @torch.inference_mode()
    def prefill(self, rows: torch.Tensor, sampling: SamplingParams, seed: int,
                force: torch.Tensor | None = None) -> FrameStep:
        rows = self._check_rows(rows)
        R = rows.shape[0]
        self.state.reset(seed, sampling.ras_window, rows[-1], R - 1)
        positions = torch.arange(R, device=self.device)
        caches = self.state.prefill_caches()
        hidden = self.model.backbone(rows[:, 0], positions, caches)
        self.state.absorb(caches)
        labels = rows[1:]
        self.model.tower(hidden[:-1], rows[:-1], labels[:, 1], is_semantic_token(self.config, labels[:, 0]),
                         positions[:-1], self.state.tower, lambda k, _: labels[:, 1 + k])
        self.state.buf.hidden.copy_(hidden[-1:])
        self._rows, self._sampling = R, sampling
        return self._step("predict", force)

    @torch.inference_mode()
    def decode_frame(self, force: torch.Tensor | None = None) -> FrameStep:
        if self._rows is None:
            raise RuntimeError("decode_frame() before prefill(): start each request with prefill")
        if self._rows >= self.config.max_context_rows:
            raise ValueError(f"context is full: {self._rows} rows reached config.max_context_rows="
                             f"{self.config.max_context_rows}; request fewer frames or a shorter prompt")
        step = self._step("frame", force)
        self._rows += 1
        return step

    def _step(self, kind: str, force: torch.Tensor | None) -> FrameStep:
        self._set_force(force)
        position = self._rows if kind == "frame" else self._rows - 1
        span = self._span(position + 1)
        if self._pool is None:
            self.program.run(kind, span, self._sampling)
        else:
            self._graph(kind, span, self._sampling).replay()
        buf = self.state.buf
        return FrameStep(frame=buf.frame, main_logits=buf.main_logits, code_logits=buf.code_logits)

    def _set_force(self, force: torch.Tensor | None) -> None:
        buf = self.state.buf
        if force is not None:
            buf.force.copy_(self._check_frame(force))
        if (force is not None) != self._forcing:
            self._forcing = force is not None
            buf.use_force.fill_(self._forcing)

    def _span(self, rows: int) -> int:
        """The attention span bucket covering `rows`: MIN_SPAN doubled until it fits, capped at the context."""
        span = MIN_SPAN
        while span < rows:
            span *= 2
        return min(span, self.config.max_context_rows)

    # ---- CUDA graphs

    def _graph(self, kind: str, span: int, sampling: SamplingParams) -> torch.cuda.CUDAGraph:
        key = (kind, span, sampling)
        if key not in self._graphs:
            self.state.recent(sampling.ras_window)  # allocated before the warm-up, so it is restored after it
            self._graphs[key], _ = capture(lambda: self.program.run(kind, span, sampling), self._pool,
                                           keep=self.state.mutable())
        return self._graphs[key]

    def _prewarm(self) -> None:
        """Capture the spans covering PREWARM_ROWS rows for the default sampling now, not in a first request."""
        with torch.inference_mode():
            self.state.buf.pos.zero_()
            span = 0
            while span < min(PREWARM_ROWS, self.config.max_context_rows):
                span = self._span(span + 1)
                for kind in ("predict", "frame"):
                    self._graph(kind, span, SamplingParams())

    # ---- whole utterances: frames stay on the device between sync points

    def generate(self, request: TTSRequest) -> Generation:
        blocks = list(self._blocks(request, []))
        frames = torch.cat(blocks) if blocks else torch.zeros((0, ROW_WIDTH), dtype=torch.long)
        return Generation(frames=frames.cpu(), audio=self.decode_audio(frames[:, 1:].T))

    def stream(self, request: TTSRequest, schedule: StreamSchedule) -> Iterator[AudioChunk]:
        """Chunks close at schedule.chunk_ends' boundaries (as the reference's per-frame loop) and at the end."""
        ends = schedule.chunk_ends(request.max_frames + 1)[:-1]  # every boundary a count <= max_frames can hit
        frames: list[torch.Tensor] = []
        emitted = 0
        for block in self._blocks(request, ends):
            frames.extend(block.unbind(0))
            if len(frames) in ends and len(frames) > emitted:
                yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)
                emitted = len(frames)
        if len(frames) > emitted:
            yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)

    def _blocks(self, request: TTSRequest, boundaries: list[int]) -> Iterator[torch.Tensor]:
        """Consecutive frame blocks (k, 11) on the device ending at each sync point (the given boundaries, every
        EOS_CHECK_EVERY frames unless ignore_eos, and max_frames), stopping before the first EOS frame. They stay
        on the device so the codec stage takes their codes by a device copy (a peer copy when it sits on another
        GPU); only the main-token column comes to the host, for the EOS check."""
        if not 1 <= request.max_frames <= self.config.max_new_frames:
            raise ValueError(f"max_frames={request.max_frames} must be in 1..config.max_new_frames="
                             f"{self.config.max_new_frames}")
        rows = build_rows(self.config, request, self.tokenizer).to(self.device)
        self.prefill(rows, request.sampling, request.seed)
        first = rows.shape[0] - 1  # history row of frame 0
        every = request.max_frames if request.ignore_eos else EOS_CHECK_EVERY
        stops = sorted({*boundaries, *range(every, request.max_frames, every), request.max_frames})
        made, start = 1, 0  # prefill predicted frame 0
        for stop in stops:
            while made < stop:
                self.decode_frame()
                made += 1
            block = self.state.buf.history[first + start:first + stop].clone()  # history is rewritten next request
            eos = (block[:, 0].cpu() == self.config.eos_token_id).nonzero() if not request.ignore_eos else []
            if len(eos):
                yield block[:int(eos[0, 0])]
                return
            yield block
            start = stop
