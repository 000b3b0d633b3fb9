"""Block FP8: float8_e4m3fn weights in BxB tiles, each with one fp32 `scale_inv = amax / 448`.

Works on 2-D (rows, cols) matrices and stacked (E, rows, cols) expert weights; the dequantised weight is
`fp8.float() * scale_inv` broadcast over each tile, the layout HF/DeepSeek-style FP8 checkpoints use.
"""
from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
_CHUNK_ELEMENTS = 1 << 26  # bounds the fp32 temporaries when quantising a large expert stack


def _check_tiling(shape: torch.Size, block: int, what: str) -> tuple[int, int]:
    if len(shape) not in (2, 3):
        raise ValueError(f"{what}: expected a 2-D (rows, cols) or 3-D (E, rows, cols) tensor, got shape {tuple(shape)}")
    rows, cols = shape[-2], shape[-1]
    if block <= 0 or rows % block or cols % block:
        raise ValueError(f"{what}: shape {tuple(shape)} does not tile into {block}x{block} blocks; "
                         f"rows and cols must be multiples of the block size")
    return rows // block, cols // block


def _quantize_tiles(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    *lead, rows, cols = w.shape
    tiles = w.float().reshape(*lead, rows // block, block, cols // block, block)
    scale_inv = tiles.abs().amax(dim=(-3, -1)) / FP8_MAX  # (*lead, rows/B, cols/B)
    # An all-zero tile keeps scale_inv = 0 (dequantises to exact zeros); divide by 1 there instead of 0.
    divisor = torch.where(scale_inv > 0, scale_inv, torch.ones_like(scale_inv))
    q = (tiles / divisor[..., :, None, :, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q.reshape(w.shape), scale_inv


def quantize_blocks(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(…, rows, cols) float tensor -> (float8_e4m3fn of the same shape, fp32 scale_inv (…, rows/B, cols/B))."""
    tiles_r, tiles_c = _check_tiling(w.shape, block, "quantize_blocks")
    if not w.is_floating_point() or w.dtype == FP8_DTYPE:
        raise TypeError(f"quantize_blocks: expected a float weight (bf16/fp16/fp32), got {w.dtype}")
    if w.dim() == 2:
        return _quantize_tiles(w, block)
    experts = w.shape[0]
    q = torch.empty(w.shape, dtype=FP8_DTYPE, device=w.device)
    scale_inv = torch.empty((experts, tiles_r, tiles_c), dtype=torch.float32, device=w.device)
    step = max(1, _CHUNK_ELEMENTS // (w.shape[1] * w.shape[2]))
    for e in range(0, experts, step):
        q[e:e + step], scale_inv[e:e + step] = _quantize_tiles(w[e:e + step], block)
    return q, scale_inv


def dequantize_blocks(fp8: torch.Tensor, scale_inv: torch.Tensor, block: int,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of `quantize_blocks` up to FP8 rounding: each tile of `fp8` times its `scale_inv`, cast to dtype."""
    tiles_r, tiles_c = _check_tiling(fp8.shape, block, "dequantize_blocks")
    if fp8.dtype != FP8_DTYPE:
        raise TypeError(f"dequantize_blocks: expected {FP8_DTYPE} weights, got {fp8.dtype}")
    expected = (*fp8.shape[:-2], tiles_r, tiles_c)
    if tuple(scale_inv.shape) != expected or scale_inv.dtype != torch.float32:
        raise ValueError(f"dequantize_blocks: scale_inv must be float32 of shape {expected} for weights "
                         f"{tuple(fp8.shape)} with block {block}; got {scale_inv.dtype} {tuple(scale_inv.shape)}")
    tiles = fp8.float().reshape(*fp8.shape[:-2], tiles_r, block, tiles_c, block) * scale_inv[..., :, None, :, None]
    return tiles.reshape(fp8.shape).to(dtype)
