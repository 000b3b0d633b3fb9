"""Teacher-forced logits of any Engine: prefill(force=frame 0) then decode_frame(force=frame f), so the
predictions are conditioned on a fixed history instead of the engine's own draws. The evaluator compares a
candidate's forced logits with the reference's on the same rows and frames.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .api import ROW_WIDTH, Engine, SamplingParams


class ForcedLogits(NamedTuple):
    main: torch.Tensor  # (F, 1 + codebook_size) float32, CPU: prediction of frame f's main token
    codes: torch.Tensor  # (F, num_codebooks - 1, head_size) float32, CPU: frame f's codes 1..9


def _copy(logits: torch.Tensor) -> torch.Tensor:
    return logits.detach().to("cpu", torch.float32, copy=True)


def teacher_forced(engine: Engine, rows: torch.Tensor, frames: torch.Tensor, seed: int = 0) -> ForcedLogits:
    """Prompt rows (R, 11) and frames (F, 11) -> the engine's logits for each frame given the frames before it
    (and, for code k, the frame's codes 0..k-1). Copied to CPU because FrameStep logits may alias buffers."""
    if frames.dim() != 2 or frames.shape[1] != ROW_WIDTH or frames.shape[0] == 0:
        raise ValueError(f"frames must be a non-empty (F, {ROW_WIDTH}) tensor, got {tuple(frames.shape)}")
    step = engine.prefill(rows, SamplingParams(), seed, force=frames[0])
    main, codes = [_copy(step.main_logits)], [_copy(step.code_logits)]
    for frame in frames[1:]:
        step = engine.decode_frame(force=frame)
        main.append(_copy(step.main_logits))
        codes.append(_copy(step.code_logits))
    return ForcedLogits(torch.stack(main), torch.stack(codes))
