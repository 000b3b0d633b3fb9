"""ReferenceEngine: the api.Engine protocol over Drama3Model and the codec, one request at a time.

prefill runs the backbone over the prompt rows and the tower teacher-forced over rows 0..R-2 (labels = rows
1..R-1), then predicts frame 0 at row R-1; decode_frame appends the last frame as the next row and predicts the
one after. generate/stream loop these until EOS (main index 0) or max_frames, and decode audio with the codec.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from reference_runtime.api import (ROW_WIDTH, AudioChunk, FrameStep, Generation, SamplingParams,
                                   StreamSchedule, TTSRequest)
from reference_runtime.config import Drama3Config
from reference_runtime.prompt import build_rows
from reference_runtime.tokenizer import load_tokenizer

from .backbone import LayerCache
from .codec import Codec
from .drama3 import Drama3Model
from .kv_cache import KVCache
from .placement import CodecStage
from .sampling import draw_code, draw_main
from .tower import is_semantic_token


@dataclass(slots=True)
class RequestState:
    sampling: SamplingParams
    generator: torch.Generator
    backbone_caches: list[LayerCache]
    tower_caches: list[KVCache]
    recent: torch.Tensor  # (ras_window,) last main indices, -1 = empty slot
    num_rows: int  # rows the backbone has consumed; the next frame is predicted at row num_rows - 1
    last_frame: torch.Tensor  # (11,) the frame predicted last, appended by the next decode_frame


class ReferenceEngine:
    def __init__(self, config: Drama3Config, model: Drama3Model, codec: Codec, device: torch.device) -> None:
        self.config, self.model, self.codec, self.device = config, model, codec, device
        self.codec_stage = CodecStage(codec)  # the codec may sit on another device (build_engine's codec_device)
        self.tokenizer = load_tokenizer(config)
        self._request: RequestState | None = None

    # ---- per-frame protocol

    @torch.inference_mode()
    def prefill(self, rows: torch.Tensor, sampling: SamplingParams, seed: int,
                force: torch.Tensor | None = None) -> FrameStep:
        rows = self._check_rows(rows)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        backbone, tower = self.model.backbone, self.model.tower
        self._request = RequestState(
            sampling=sampling, generator=generator, backbone_caches=backbone.new_caches(),
            tower_caches=tower.new_caches(), num_rows=rows.shape[0], last_frame=rows[-1],
            recent=torch.full((sampling.ras_window,), -1, dtype=torch.long, device=self.device),
        )
        positions = torch.arange(rows.shape[0], device=self.device)
        hidden = backbone(rows[:, 0], positions, self._request.backbone_caches)
        labels = rows[1:]
        if len(labels):  # teacher-forced tower over rows 0..R-2: fills its KV caches, logits unused
            tower(hidden[:-1], rows[:-1], labels[:, 1], is_semantic_token(self.config, labels[:, 0]),
                  positions[:-1], self._request.tower_caches, lambda k, _: labels[:, 1 + k])
        return self._predict(hidden[-1:], rows[-1:], force)

    @torch.inference_mode()
    def decode_frame(self, force: torch.Tensor | None = None) -> FrameStep:
        req = self._request
        if req is None:
            raise RuntimeError("decode_frame() before prefill(): start each request with prefill")
        if req.num_rows >= self.config.max_context_rows:
            raise ValueError(f"context is full: {req.num_rows} rows reached config.max_context_rows="
                             f"{self.config.max_context_rows}; request fewer frames or a shorter prompt")
        row = req.last_frame[None]
        position = torch.tensor([req.num_rows], device=self.device)
        req.num_rows += 1
        hidden = self.model.backbone(row[:, 0], position, req.backbone_caches)
        return self._predict(hidden, row, force)

    def _predict(self, hidden: torch.Tensor, row: torch.Tensor, force: torch.Tensor | None) -> FrameStep:
        """Draw (or take the forced) frame for backbone hidden (1, hidden) of `row` (1, 11) at row num_rows-1."""
        req, cfg = self._request, self.config
        main_logits = self.model.backbone.main_logits(hidden)[0]
        if force is None:
            index = draw_main(main_logits, req.sampling, req.recent, req.generator)
            semantic = index > 0
        else:
            forced = self._check_frame(force)
            semantic = is_semantic_token(cfg, forced[0])
            index = torch.where(semantic, forced[0] - cfg.semantic_begin + 1, 0)
        code0 = (index - 1).clamp_min(0)
        codes = [code0[None]]

        def choose(k: int, logits: torch.Tensor) -> torch.Tensor:
            if force is None:
                codes.append(draw_code(logits, req.sampling, cfg.codec.residual_codebook_size, req.generator))
            else:
                codes.append(forced[None, 1 + k])
            return codes[-1]

        position = torch.tensor([req.num_rows - 1], device=self.device)
        code_logits = self.model.tower(hidden, row, code0[None], semantic[None], position, req.tower_caches,
                                       choose)
        if force is None:
            main = torch.where(semantic, cfg.semantic_begin + code0, cfg.eos_token_id)
            frame = torch.cat((main[None], torch.cat(codes) * semantic))  # an EOS frame carries zero codes
        else:
            frame = forced
        req.recent = torch.cat((req.recent, index[None]))[1:]
        req.last_frame = frame
        return FrameStep(frame=frame, main_logits=main_logits, code_logits=code_logits[0])

    # ---- whole utterances

    @torch.inference_mode()
    def decode_audio(self, codes: torch.Tensor) -> torch.Tensor:
        if codes.dim() != 2 or codes.shape[0] != self.config.num_codebooks:
            raise ValueError(f"decode_audio expects codes of shape ({self.config.num_codebooks}, n), "
                             f"got {tuple(codes.shape)}")
        if codes.shape[1] == 0:
            return torch.zeros(0)
        return self.codec_stage.decode(codes)

    def generate(self, request: TTSRequest) -> Generation:
        frames = list(self._frames(request))
        stacked = torch.stack(frames) if frames else torch.zeros((0, ROW_WIDTH), dtype=torch.long)
        return Generation(frames=stacked.cpu(), audio=self.decode_audio(stacked[:, 1:].T))

    def stream(self, request: TTSRequest, schedule: StreamSchedule) -> Iterator[AudioChunk]:
        """Chunks close when the frame count reaches a boundary of `schedule.chunk_ends` (a prefix of it, since
        the final count is unknown while generating), and at the end."""
        frames: list[torch.Tensor] = []
        emitted = 0
        for frame in self._frames(request):
            frames.append(frame)
            n = len(frames)
            if n in schedule.chunk_ends(n + 1)[:-1]:
                yield self._chunk(frames, emitted, n, schedule.overlap_frames)
                emitted = n
        if len(frames) > emitted:
            yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)

    def _frames(self, request: TTSRequest) -> Iterator[torch.Tensor]:
        """Frames (11,) on the engine's device (the codec takes them from there) until EOS (excluded) or max_frames;
        ignore_eos keeps going through EOS frames."""
        if not 1 <= request.max_frames <= self.config.max_new_frames:
            raise ValueError(f"max_frames={request.max_frames} must be in 1..config.max_new_frames="
                             f"{self.config.max_new_frames}")
        rows = build_rows(self.config, request, self.tokenizer).to(self.device)
        step = self.prefill(rows, request.sampling, request.seed)
        for n in range(1, request.max_frames + 1):
            frame = step.frame.clone()  # a FrameStep may alias engine buffers (api.py)
            if not request.ignore_eos and int(frame[0]) == self.config.eos_token_id:
                return
            yield frame
            if n < request.max_frames:
                step = self.decode_frame()

    def _chunk(self, frames: list[torch.Tensor], start: int, end: int, overlap: int | None) -> AudioChunk:
        first = 0 if overlap is None else max(0, start - overlap)  # left context the codec re-decodes
        window = torch.stack(frames[first:end])
        audio = self.decode_audio(window[:, 1:].T)
        return AudioChunk(audio=audio[(start - first) * self.config.codec.frame_samples:],
                          frame_start=start, frame_end=end, frames=window[start - first:].cpu())

    # ---- input validation

    def _check_rows(self, rows: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        if rows.dim() != 2 or rows.shape[1] != ROW_WIDTH or rows.dtype != torch.long or rows.shape[0] == 0:
            raise ValueError(f"prompt rows must be a non-empty (R, {ROW_WIDTH}) int64 tensor, got "
                             f"{rows.dtype} {tuple(rows.shape)}; build them with reference_runtime.prompt.build_rows")
        if rows.shape[0] > cfg.max_prompt_rows:
            raise ValueError(f"prompt has {rows.shape[0]} rows, over config.max_prompt_rows={cfg.max_prompt_rows}; "
                             f"shorten the text or the voice references")
        if rows.shape[0] > cfg.max_context_rows:
            raise ValueError(f"prompt has {rows.shape[0]} rows, over config.max_context_rows={cfg.max_context_rows}")
        rows = rows.to(self.device)
        bad = (rows < 0).any() | (rows[:, 0] >= cfg.vocab_size).any() | (rows[:, 1:] >= cfg.codebook_size).any()
        if bool(bad):  # one host sync, not three: it sits on the time to first audio
            raise ValueError(f"prompt rows out of range: main tokens must be in [0, {cfg.vocab_size}) and codes in "
                             f"[0, {cfg.codebook_size})")
        return rows

    def _check_frame(self, frame: torch.Tensor) -> torch.Tensor:
        if frame.shape != (ROW_WIDTH,) or frame.dtype != torch.long:
            raise ValueError(f"force= takes one frame row: a ({ROW_WIDTH},) int64 tensor, got "
                             f"{frame.dtype} {tuple(frame.shape)}")
        return frame.to(self.device)
