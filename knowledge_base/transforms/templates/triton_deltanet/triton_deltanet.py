"""The gated delta rule as one fused recurrent Triton kernel: one program per (value head, BV-wide slice of the
value dim) keeps its (dk, BV) fp32 state tile in registers across all T tokens, so a prefill is one launch
instead of T rounds of small torch ops, and a decode step (T = 1) one launch instead of ~6. The value columns of
the state evolve independently (each column's update reads only k, its own v entry and itself), which is what
lets the value dim split across programs. T is a runtime argument: one compiled kernel serves every length.
An optional device scalar `valid` stops the recurrence after that many tokens, so a prefill padded to a CUDA
graph's row bucket (cuda_graph_prefill) neither advances the state over the padding nor spends time on it.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .triton_deltanet_params import BLOCK_V, NUM_WARPS


@triton.jit(do_not_specialize=["T"])
def _delta_rule_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, g_ptr, state_ptr, o_ptr, valid_ptr, T, NV: tl.constexpr,
                       DK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr, HAS_VALID: tl.constexpr):
    head = tl.program_id(0)
    keys = tl.arange(0, DK)
    values = tl.program_id(1) * BV + tl.arange(0, BV)
    tile = state_ptr + head * DK * DV + keys[:, None] * DV + values[None, :]
    s = tl.load(tile)
    n = T
    if HAS_VALID:
        n = tl.minimum(n, tl.load(valid_ptr).to(tl.int32))
    # A while loop, not range(T): Triton 3.6's interpreter (the CPU tests) cannot index a runtime int under NumPy 2.4
    t = 0
    while t < n:
        row = t * NV + head
        k = tl.load(k_ptr + row * DK + keys)
        s *= tl.exp(tl.load(g_ptr + row))
        delta = (tl.load(v_ptr + row * DV + values) - tl.sum(s * k[:, None], axis=0)) * tl.load(beta_ptr + row)
        s += k[:, None] * delta[None, :]
        tl.store(o_ptr + row * DV + values, tl.sum(s * tl.load(q_ptr + row * DK + keys)[:, None], axis=0))
        t += 1
    tl.store(tile, s)


def triton_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
                      state: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """deltanet.delta_rule, fused: q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), fp32; updates state
    (nv, dk, dv) fp32 in place. Returns o (T, nv, dv). With `valid` ((1,) int64 on the device) only the first
    `valid` tokens advance the state and the outputs of the rest are zero. No host syncs, static-shape outputs:
    graph-capturable."""
    T, nv, dk = q.shape
    dv = v.shape[-1]
    if dk & (dk - 1):
        raise ValueError(f"triton_delta_rule spans the key dim with one tl.arange: dk={dk} must be a power of two")
    if not (state.is_contiguous() and state.dtype == torch.float32):
        raise ValueError("triton_delta_rule updates the state in place: it must be a contiguous fp32 tensor")
    bv = math.gcd(BLOCK_V, dv)  # the largest power of two up to BLOCK_V that tiles dv exactly
    # zeros past `valid`: padded rows flow on through the layers (and into KV caches), so they must stay finite
    out = (torch.empty if valid is None else torch.zeros)((T, nv, dv), dtype=torch.float32, device=q.device)
    # The kernel indexes rows as contiguous arrays; the prefill's v is a strided view of the conv output. Without
    # `valid` the kernel never reads valid_ptr, so any pointer will do.
    _delta_rule_kernel[(nv, dv // bv)](q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(),
                                       g.contiguous(), state, out, state if valid is None else valid, T, nv, dk, dv,
                                       bv, valid is not None, num_warps=NUM_WARPS)
    return out
