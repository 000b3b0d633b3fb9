"""The gated delta rule over a prompt in chunks of CHUNK tokens on the tensor cores: the recurrence's sequential
depth becomes T / CHUNK chunk steps of a few small matrix products instead of T token steps of reductions.

The chunk form (the WY/UT representation of Gated DeltaNet, as fla's chunk kernels use): within a chunk with G the
cumulative log-decay and S0 the state entering it, delta = U - W S0 where [W | U] = (I + A)^-1 [beta exp(G) K |
beta V], A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j); then O = exp(G) (Q S0) + (Q K^T . exp(G_i - G_j), j <= i)
delta and S = exp(G_C) S0 + (K . exp(G_C - G))^T delta. (I + A)^-1 by forward substitution, row by row: a
power series in A (A^CHUNK = 0) would need fewer steps, but with correlated keys, beta near 1 and little decay its
terms grow to ~C(CHUNK, CHUNK / 2) times the result and cancel in fp32. Decay differences are only exponentiated
for j <= i (<= 1). Products run as "tf32x3" (three TF32 tensor-core passes: about fp32's precision, which the
teacher-forced gate and the recurrent kernel's fp32 state need).

Two kernels: every (value head, chunk)'s W, U and G in parallel (the substitution's CHUNK - 1 steps are off the
sequential path), then per (value head, BLOCK_V value columns) the
chunks in order with the (dk, BLOCK_V) state tile in registers, each chunk's inputs loaded during the one before.
With a device row count `valid` the rows from it on are identity steps (zero k, v, beta, g) and their outputs zero.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .chunked_delta_rule_params import BLOCK_V, CHUNK, NUM_WARPS

PRECISION = "tf32x3"


@triton.jit
def _rows(n_ptr, T, HAS_VALID: tl.constexpr):
    """The rows that advance the state: T, or the device count `valid` when smaller."""
    n = T
    if HAS_VALID:
        n = tl.minimum(n, tl.load(n_ptr).to(tl.int32))
    return n


@triton.jit(do_not_specialize=["T"])
def _factors_kernel(k_ptr, v_ptr, beta_ptr, g_ptr, w_ptr, u_ptr, gc_ptr, valid_ptr, T, NV: tl.constexpr,
                    DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, HAS_VALID: tl.constexpr,
                    PREC: tl.constexpr):
    """One (value head, chunk): G, W and U into (NV, chunks * C, .) buffers; chunks past the rows are skipped."""
    head = tl.program_id(0)
    start = tl.program_id(1) * C
    n = _rows(valid_ptr, T, HAS_VALID)
    if start < n:
        i = tl.arange(0, C)
        rows = start + i
        live = rows < n
        beta = tl.load(beta_ptr + rows * NV + head, mask=live, other=0.0)
        gc = tl.cumsum(tl.load(g_ptr + rows * NV + head, mask=live, other=0.0), axis=0)
        k = tl.load(k_ptr + (rows[:, None] * NV + head) * DK + tl.arange(0, DK)[None, :], mask=live[:, None],
                    other=0.0)
        below = i[:, None] > i[None, :]
        decay = tl.exp(tl.where(below, gc[:, None] - gc[None, :], 0.0))
        a = tl.where(below, beta[:, None] * decay * tl.dot(k, tl.trans(k), input_precision=PREC), 0.0)
        inv = tl.where(i[:, None] == i[None, :], 1.0, 0.0)  # row r of (I + A)^-1 = e_r - A_r (I + A)^-1
        for r in tl.static_range(1, C):
            a_r = tl.sum(tl.where(i[:, None] == r, a, 0.0), axis=0)
            inv -= tl.where(i[:, None] == r, tl.sum(a_r[:, None] * inv, axis=0)[None, :], 0.0)
        out = (head * tl.num_programs(1) * C + rows)[:, None]
        w = tl.dot(inv, k * (beta * tl.exp(gc))[:, None], input_precision=PREC)
        tl.store(w_ptr + out * DK + tl.arange(0, DK)[None, :], w)
        v = tl.load(v_ptr + (rows[:, None] * NV + head) * DV + tl.arange(0, DV)[None, :], mask=live[:, None],
                    other=0.0)
        tl.store(u_ptr + out * DV + tl.arange(0, DV)[None, :], tl.dot(inv, v * beta[:, None], input_precision=PREC))
        tl.store(gc_ptr + head * tl.num_programs(1) * C + rows, gc)


@triton.jit
def _chunk_inputs(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, head, start, n, TP, values, NV: tl.constexpr,
                  DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr):
    """The chunk from row `start`: q, k (rows past n zero), W, U (this program's value columns) and G."""
    rows = start + tl.arange(0, C)
    live = (rows < n)[:, None]
    keys = tl.arange(0, DK)[None, :]
    q = tl.load(q_ptr + (rows[:, None] * NV + head) * DK + keys, mask=live, other=0.0)
    k = tl.load(k_ptr + (rows[:, None] * NV + head) * DK + keys, mask=live, other=0.0)
    factor = head * TP + rows
    w = tl.load(w_ptr + factor[:, None] * DK + keys)
    u = tl.load(u_ptr + factor[:, None] * DV + values[None, :])
    gc = tl.load(gc_ptr + factor)
    return q, k, w, u, gc


@triton.jit(do_not_specialize=["T", "TP"])
def _recurrence_kernel(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, state_ptr, o_ptr, valid_ptr, T, TP, NV: tl.constexpr,
                       DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, BV: tl.constexpr,
                       HAS_VALID: tl.constexpr, PREC: tl.constexpr):
    """One (value head, BV value columns): the chunks in order, the (DK, BV) state tile in registers; TP = the
    factor buffers' rows (chunks * C). Rows past n are stored as zeros (their q is zero)."""
    head = tl.program_id(0)
    values = tl.program_id(1) * BV + tl.arange(0, BV)
    tile = state_ptr + head * DK * DV + tl.arange(0, DK)[:, None] * DV + values[None, :]
    s = tl.load(tile)
    n = _rows(valid_ptr, T, HAS_VALID)
    i = tl.arange(0, C)
    causal = i[:, None] >= i[None, :]
    q, k, w, u, gc = _chunk_inputs(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, head, 0, n, TP, values, NV, DK, DV, C)
    start = 0
    while start < n:  # a while loop, not range(): Triton 3.6's interpreter (the CPU tests) cannot index a runtime int
        # the next chunk's inputs (this one's again past the end: always in bounds) load while this one computes
        ahead = tl.minimum(start + C, (TP // C - 1) * C)
        q_next, k_next, w_next, u_next, gc_next = _chunk_inputs(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, head, ahead, n,
                                                                TP, values, NV, DK, DV, C)
        last = tl.sum(tl.where(i == C - 1, gc, 0.0), axis=0)
        delta = u - tl.dot(w, s, input_precision=PREC)  # (C, BV)
        scores = tl.dot(q, tl.trans(k), input_precision=PREC)
        scores = tl.where(causal, scores * tl.exp(tl.where(causal, gc[:, None] - gc[None, :], 0.0)), 0.0)
        o = tl.exp(gc)[:, None] * tl.dot(q, s, input_precision=PREC) + tl.dot(scores, delta, input_precision=PREC)
        rows = start + i
        tl.store(o_ptr + (rows[:, None] * NV + head) * DV + values[None, :], o, mask=(rows < T)[:, None])
        s = tl.exp(last) * s + tl.dot(tl.trans(k * tl.exp(last - gc)[:, None]), delta, input_precision=PREC)
        q, k, w, u, gc = q_next, k_next, w_next, u_next, gc_next
        start += C
    tl.store(tile, s)


def chunked_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
                       state: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """deltanet.delta_rule in chunks: q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), fp32; updates state
    (nv, dk, dv) fp32 in place. Returns o (T, nv, dv). With `valid` ((1,) int64 on the device) only the first
    `valid` tokens advance the state and the outputs of the rest are zero. No host syncs: graph-capturable."""
    T, nv, dk = q.shape
    dv = v.shape[-1]
    bv = math.gcd(BLOCK_V, dv)
    if dk & (dk - 1) or dv & (dv - 1) or min(dk, bv) < 16:
        raise ValueError(f"chunked_delta_rule tiles a head with tl.arange and tl.dot: dk={dk} and dv={dv} must be "
                         "powers of two, dk and the value block at least 16")
    if not (state.is_contiguous() and state.dtype == torch.float32):
        raise ValueError("chunked_delta_rule updates the state in place: it must be a contiguous fp32 tensor")
    # zeros past `valid`: the recurrence stops at the chunk holding the last real row, and padded rows flow on
    # through the layers (and into KV caches), so they must stay finite
    out = (torch.empty if valid is None else torch.zeros)((T, nv, dv), dtype=torch.float32, device=q.device)
    if T == 0:
        return out
    q, k, v, beta, g = q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), g.contiguous()
    chunks = -(-T // CHUNK)
    f32 = {"dtype": torch.float32, "device": q.device}
    w, u = torch.empty((nv, chunks * CHUNK, dk), **f32), torch.empty((nv, chunks * CHUNK, dv), **f32)
    gc = torch.empty((nv, chunks * CHUNK), **f32)
    # the factors of chunks past `valid` are never written: the recurrence only prefetches the first of them after
    # its last chunk, and never uses it
    length = state if valid is None else valid  # without `valid` the kernels never read it: any pointer will do
    _factors_kernel[(nv, chunks)](k, v, beta, g, w, u, gc, length, T, nv, dk, dv, CHUNK, valid is not None,
                                  PRECISION, num_warps=NUM_WARPS)
    _recurrence_kernel[(nv, dv // bv)](q, k, w, u, gc, state, out, length, T, chunks * CHUNK, nv, dk, dv, CHUNK, bv,
                                       valid is not None, PRECISION, num_warps=NUM_WARPS)
    return out
