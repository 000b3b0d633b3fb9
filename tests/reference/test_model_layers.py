"""Norms and rotary embeddings of reference_runtime.model.layers against their defining formulas."""
from __future__ import annotations

import torch

from reference_runtime.model.layers import apply_rope, gated_rms_norm, rms_norm, swiglu


def test_rms_norm_is_zero_centred_and_keeps_dtype():
    gen = torch.Generator().manual_seed(0)  # unseeded, a row of small values now and then moved the unit check by eps
    x = torch.randn(3, 8, generator=gen).bfloat16()
    w = torch.randn(8, generator=gen).bfloat16()
    y = rms_norm(x, w, 1e-6)
    assert y.dtype == torch.bfloat16
    xf = x.float()
    expected = xf / xf.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * (1 + w.float())
    torch.testing.assert_close(y.float(), expected, atol=1e-2, rtol=1e-2)
    unit = rms_norm(x.float(), torch.zeros(8), 1e-6)  # w = 0 is the identity gain
    torch.testing.assert_close(unit.pow(2).mean(-1), torch.ones(3), atol=1e-5, rtol=0)


def test_gated_rms_norm_uses_plain_gamma_and_silu_gate():
    x, z, w = torch.randn(2, 4, 6), torch.randn(2, 4, 6), torch.randn(6)
    expected = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w * torch.nn.functional.silu(z)
    torch.testing.assert_close(gated_rms_norm(x, z, w, 1e-6), expected)


def test_swiglu_shapes():
    x = torch.randn(5, 8)
    assert swiglu(x, torch.randn(16, 8), torch.randn(16, 8), torch.randn(8, 16)).shape == (5, 8)


def test_rope_leaves_position_zero_and_the_unrotated_dims_alone():
    x = torch.randn(4, 2, 16)
    for interleaved in (False, True):
        y = apply_rope(x, torch.tensor([0, 1, 2, 3]), 8, 1e7, interleaved)
        torch.testing.assert_close(y[0], x[0])
        torch.testing.assert_close(y[:, :, 8:], x[:, :, 8:])
        torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # a rotation
        assert not torch.allclose(y[1], x[1])


def test_rope_pairs_dims_by_layout():
    """Rotate-half pairs dim i with i + rotary_dim/2; interleaved pairs 2i with 2i+1."""
    x = torch.zeros(1, 1, 8)
    x[..., 0] = 1.0  # only dim 0 set: the rotation moves mass into dim 0's partner
    pos = torch.tensor([1])
    half = apply_rope(x, pos, 4, 1.0, interleaved=False)
    inter = apply_rope(x, pos, 4, 1.0, interleaved=True)
    assert half[0, 0, 2] != 0 and half[0, 0, 1] == 0
    assert inter[0, 0, 1] != 0 and inter[0, 0, 2] == 0
    torch.testing.assert_close(half[0, 0, 0], torch.cos(torch.tensor(1.0)))


def test_rope_scores_depend_only_on_relative_position():
    q, k = torch.randn(1, 1, 16), torch.randn(1, 1, 16)
    for interleaved in (False, True):
        def score(pq: int, pk: int) -> torch.Tensor:
            rq = apply_rope(q, torch.tensor([pq]), 8, 1e4, interleaved)
            rk = apply_rope(k, torch.tensor([pk]), 8, 1e4, interleaved)
            return (rq * rk).sum()
        torch.testing.assert_close(score(7, 3), score(104, 100), atol=1e-4, rtol=1e-4)
