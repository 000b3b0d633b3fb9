"""Block-FP8 quantise/dequantise: E4M3 error bounds, exact round trips, zero tiles, expert stacks, bad input."""
from __future__ import annotations

import pytest
import torch

from reference_runtime.fp8 import FP8_DTYPE, FP8_MAX, dequantize_blocks, quantize_blocks

E4M3_HALF_ULP = 2.0 ** -4  # 3 mantissa bits: round-to-nearest error <= 2^-4 relative in the normal range
E4M3_SUBNORMAL_HALF_STEP = 2.0 ** -10  # subnormal spacing 2^-9, in units of the tile scale


def _tile_scale(scale_inv: torch.Tensor, block: int) -> torch.Tensor:
    return scale_inv.repeat_interleave(block, dim=-2).repeat_interleave(block, dim=-1)


def _assert_within_e4m3_bounds(w: torch.Tensor, block: int) -> None:
    q, scale_inv = quantize_blocks(w, block)
    back = dequantize_blocks(q, scale_inv, block)
    scale = _tile_scale(scale_inv, block)
    bound = E4M3_HALF_ULP * w.abs() + E4M3_SUBNORMAL_HALF_STEP * scale
    err = (back - w).abs()
    worst = (err / bound).max().item()
    assert worst <= 1 + 1e-5, f"fp8 round-trip error exceeds the E4M3 bound by x{worst:.3f}"


def test_round_trip_error_within_e4m3_bounds_2d():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 96, generator=gen) * torch.logspace(-3, 2, 96)  # tiles of very different magnitude
    _assert_within_e4m3_bounds(w, 16)


def test_round_trip_error_within_e4m3_bounds_3d_stack():
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(5, 32, 48, generator=gen) * torch.tensor([1e-4, 1e-2, 1.0, 1e2, 1e4])[:, None, None]
    _assert_within_e4m3_bounds(w, 16)


def test_scale_is_tile_amax_over_448():
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(3, 32, 32, generator=gen)
    _, scale_inv = quantize_blocks(w, 16)
    amax = w.reshape(3, 2, 16, 2, 16).abs().amax(dim=(2, 4))
    torch.testing.assert_close(scale_inv, amax / FP8_MAX, rtol=0, atol=0)
    assert scale_inv.dtype == torch.float32 and scale_inv.shape == (3, 2, 2)


def test_representable_values_round_trip_exactly():
    # Every tile holds E4M3 values times a power of two, with +-448 present so scale_inv is that power of two.
    gen = torch.Generator().manual_seed(3)
    block = 8
    codes = torch.randint(0, 256, (4, 24, 32), generator=gen, dtype=torch.uint8).view(FP8_DTYPE).float()
    codes = torch.where(codes.isnan(), torch.zeros_like(codes), codes)
    codes[:, ::block, ::block] = FP8_MAX
    powers = 2.0 ** torch.randint(-12, 12, (4, 3, 4), generator=gen).float()
    w = codes * _tile_scale(powers, block)
    q, scale_inv = quantize_blocks(w, block)
    assert torch.equal(scale_inv, powers)
    assert torch.equal(dequantize_blocks(q, scale_inv, block), w)


def test_zero_tiles_quantise_to_exact_zeros():
    w = torch.randn(32, 32)
    w[:16, 16:] = 0
    q, scale_inv = quantize_blocks(w, 16)
    assert scale_inv[0, 1] == 0
    back = dequantize_blocks(q, scale_inv, 16)
    assert torch.isfinite(back).all() and torch.equal(back[:16, 16:], torch.zeros(16, 16))


def test_dequantize_casts_to_requested_dtype():
    w = torch.randn(2, 16, 32, dtype=torch.bfloat16)
    q, scale_inv = quantize_blocks(w, 16)
    assert q.dtype == FP8_DTYPE and q.shape == w.shape
    assert dequantize_blocks(q, scale_inv, 16, torch.bfloat16).dtype == torch.bfloat16


def test_large_stack_is_quantised_in_chunks_like_one_pass(monkeypatch):
    import reference_runtime.fp8 as fp8
    w = torch.randn(7, 16, 32)
    whole = quantize_blocks(w, 16)
    monkeypatch.setattr(fp8, "_CHUNK_ELEMENTS", 2 * 16 * 32)  # 2 experts per chunk: 4 uneven chunks
    chunked = quantize_blocks(w, 16)
    assert torch.equal(whole[0].view(torch.uint8), chunked[0].view(torch.uint8))
    assert torch.equal(whole[1], chunked[1])


@pytest.mark.parametrize("shape", [(30, 32), (32, 30), (32,), (2, 2, 32, 32)])
def test_untileable_shapes_are_rejected(shape):
    with pytest.raises(ValueError, match="quantize_blocks"):
        quantize_blocks(torch.randn(shape), 16)


def test_dequantize_rejects_mismatched_scale():
    q, scale_inv = quantize_blocks(torch.randn(32, 32), 16)
    with pytest.raises(ValueError, match=r"scale_inv must be float32 of shape \(2, 2\)"):
        dequantize_blocks(q, scale_inv[:1], 16)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        dequantize_blocks(q.float(), scale_inv, 16)
