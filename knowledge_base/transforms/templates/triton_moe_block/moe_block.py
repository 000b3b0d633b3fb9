"""A backbone layer's MoE block of the graphed decode frame, x + moe_decode(post_attention_layernorm(x)), as three
Triton kernels instead of five launches (the norm, the router | shared-expert GEMV, the two fused MoE kernels and
the residual add), because the captured frame is bound by its kernel count:
(1) every program recomputes the RMS of x (a 4 KB read: cheaper than a launch), then its rows of the fused router |
    shared gate | shared up | shared-expert gate projection, the last tile masked (E + 2 I_s + 1 rows split into no
    power-of-two tile); program 0 also writes the normed row, the gate|up kernel's input;
(2, 3) triton_moe_fused's kernels, the down kernel adding its output to x.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.config import BackboneConfig

from .decode_ops import norm
from .decode_weights import MoEWeights
from .fused_moe import fused_moe_decode
from .moe_block_params import BLOCK_K, BLOCK_N, NUM_WARPS
from .triton_tower import _block, _chunks, _norm_chunk, _rstd_of, _tile_dot, _tiles


@triton.jit
def _norm_proj_kernel(x_ptr, gain_ptr, w_ptr, out_ptr, h_ptr, eps, K: tl.constexpr, N: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr):
    first = tl.program_id(0) * BN
    rows = first + tl.arange(0, BN)
    used = rows < N
    ws = _tiles(w_ptr, rows, used, K, BK, K)  # before the RMS's reduction, as triton_tower's GEMVs
    xs, gains = _chunks(x_ptr, K, BK, ""), _chunks(gain_ptr, K, BK, "")
    rstd = _rstd_of(xs, K, BK, eps)
    acc = tl.zeros((BN,), tl.float32)
    for c in tl.static_range(K // BK):
        cols = c * BK + tl.arange(0, BK)
        h = _norm_chunk(xs[c], gains[c], rstd)
        tl.store(h_ptr + cols, h.to(h_ptr.dtype.element_ty), mask=(cols < K) & (first == 0))
        acc += _tile_dot(ws[c], h)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=used)


def moe_block(x: torch.Tensor, gain: torch.Tensor, w: MoEWeights, cfg: BackboneConfig) -> torch.Tensor:
    """x + decode_moe.moe_decode(norm(x, gain)): (1, hidden) in x's dtype."""
    if len(w.proj.mats) > 1:  # cuda_graph_frame(fuse_projections=False): the norm and the projection's GEMVs
        h = norm(x, gain, cfg.rms_norm_eps)
        return fused_moe_decode(h, *w.proj(h), w, cfg, residual=x)
    mat = w.proj.mats[0]
    if not (x.is_contiguous() and mat.is_contiguous()):
        raise ValueError("moe_block reads the activations and weights as contiguous arrays")
    rows, hidden = mat.shape
    proj = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    h = torch.empty_like(x)
    bn = min(BLOCK_N, triton.next_power_of_2(rows))
    _norm_proj_kernel[(triton.cdiv(rows, bn),)](x, gain, mat, proj, h, cfg.rms_norm_eps, hidden, rows, bn,
                                               _block(hidden, BLOCK_K), num_warps=NUM_WARPS)
    return fused_moe_decode(h, *proj.split(w.proj.sizes, dim=-1), w, cfg, residual=x)
