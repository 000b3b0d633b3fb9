"""The gated delta rule as one fused recurrent Triton kernel: one program per (value head, BV-wide slice of the
value dim) keeps its (dk, BV) fp32 state tile in registers across all T tokens, so a prefill is one launch
instead of T rounds of small torch ops, and a decode step (T = 1) one launch instead of ~6. The value columns of
the state evolve independently (each column's update reads only k, its own v entry and itself), which is what
lets the value dim split across programs. T is a runtime argument: one compiled kernel serves every length.
An optional device scalar `valid` stops the recurrence after that many tokens, so a prefill padded to a CUDA
graph's row bucket (cuda_graph_prefill) neither advances the state over the padding nor spends time on it.

With CHUNK_ROWS, calls of at least that many tokens (prefills) take the chunked form instead (the WY/UT form of
the gated delta rule, as in Gated DeltaNet and fla's chunk kernels): within a chunk of C tokens, with G the
cumulative log-decay and S0 the state entering it, the updates are delta = U - W S0 where [W | U] =
(I + A)^-1 [beta exp(G) K | beta V], A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j); then
O = exp(G) (Q S0) + (Q K^T . exp(G_i - G_j), j <= i) delta and S = exp(G_C) S0 + (K . exp(G_C - G))^T delta.
One kernel computes every chunk's W, U, G in parallel (the triangular inverse by forward substitution), a second
runs the chunks in order, a few fp32 tile products each: the sequential depth is T / C steps, not T.
Decay differences are only ever exponentiated for j <= i (<= 1), so nothing overflows.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .triton_deltanet_params import BLOCK_V, CHUNK_ROWS, NUM_WARPS

# The chunked kernels' tiles: width over the key and value dims (capped to what tiles them), and warps per program
# (their (chunk, dk) tiles need more registers than the recurrent kernel's)
CHUNK_BLOCK, CHUNK_WARPS = 32, 8


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
    # A while loop, not range(T): Triton 3.6's interpreter (the CPU tests) cannot index a runtime int under NumPy 2.4.
    # Each token's inputs are loaded one iteration ahead (the last token's again at the end: always in bounds, as
    # T >= 1 here), so their memory latency overlaps the previous token's update instead of stalling every token.
    row = head
    k, q = tl.load(k_ptr + row * DK + keys), tl.load(q_ptr + row * DK + keys)
    v, beta, g = tl.load(v_ptr + row * DV + values), tl.load(beta_ptr + row), tl.load(g_ptr + row)
    t = 0
    while t < n:
        ahead = tl.minimum(t + 1, T - 1) * NV + head
        k_next, q_next = tl.load(k_ptr + ahead * DK + keys), tl.load(q_ptr + ahead * DK + keys)
        v_next, beta_next = tl.load(v_ptr + ahead * DV + values), tl.load(beta_ptr + ahead)
        g_next = tl.load(g_ptr + ahead)
        s *= tl.exp(g)
        delta = (v - tl.sum(s * k[:, None], axis=0)) * beta
        s += k[:, None] * delta[None, :]
        tl.store(o_ptr + row * DV + values, tl.sum(s * q[:, None], axis=0))
        k, q, v, beta, g, row = k_next, q_next, v_next, beta_next, g_next, ahead
        t += 1
    tl.store(tile, s)


@triton.jit(do_not_specialize=["T"])
def _chunk_factors_kernel(k_ptr, v_ptr, beta_ptr, g_ptr, w_ptr, u_ptr, gc_ptr, valid_ptr, T, NV: tl.constexpr,
                          DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, BD: tl.constexpr,
                          HAS_VALID: tl.constexpr):
    """One (value head, chunk): G (the cumulative log-decay), W and U into (NV, chunks * C, .) buffers. Tokens
    from n = min(T, valid) on are identity steps (zero k, v, beta and g); chunks starting past n are skipped."""
    head = tl.program_id(0)
    start = tl.program_id(1) * C
    n = T
    if HAS_VALID:
        n = tl.minimum(n, tl.load(valid_ptr).to(tl.int32))
    if start < n:
        i = tl.arange(0, C)
        rows = start + i
        live = rows < n
        beta = tl.load(beta_ptr + rows * NV + head, mask=live, other=0.0)
        gc = tl.cumsum(tl.load(g_ptr + rows * NV + head, mask=live, other=0.0), axis=0)
        cols = tl.arange(0, BD)
        kk = tl.zeros((C, C), tl.float32)
        for d in range(0, DK, BD):
            kb = tl.load(k_ptr + (rows[:, None] * NV + head) * DK + d + cols[None, :], mask=live[:, None], other=0.0)
            kk += tl.dot(kb, tl.trans(kb), input_precision="ieee")
        below = i[:, None] > i[None, :]
        a = tl.where(below, beta[:, None] * tl.exp(tl.where(below, gc[:, None] - gc[None, :], 0.0)) * kk, 0.0)
        inv = tl.where(i[:, None] == i[None, :], 1.0, 0.0)  # (I + A)^-1, row by row: inv_r = e_r - A_r inv
        for r in range(1, C):
            a_r = tl.sum(tl.where(i[:, None] == r, a, 0.0), axis=0)
            inv -= tl.where(i[:, None] == r, tl.sum(a_r[:, None] * inv, axis=0)[None, :], 0.0)
        out = (head * tl.num_programs(1) * C + rows)[:, None]
        for d in range(0, DK, BD):
            kb = tl.load(k_ptr + (rows[:, None] * NV + head) * DK + d + cols[None, :], mask=live[:, None], other=0.0)
            kb *= (beta * tl.exp(gc))[:, None]
            tl.store(w_ptr + out * DK + d + cols[None, :], tl.dot(inv, kb, input_precision="ieee"))
        for d in range(0, DV, BD):
            vb = tl.load(v_ptr + (rows[:, None] * NV + head) * DV + d + cols[None, :], mask=live[:, None], other=0.0)
            tl.store(u_ptr + out * DV + d + cols[None, :], tl.dot(inv, vb * beta[:, None], input_precision="ieee"))
        tl.store(gc_ptr + head * tl.num_programs(1) * C + rows, gc)


@triton.jit(do_not_specialize=["T", "TP"])
def _chunk_recurrence_kernel(q_ptr, k_ptr, w_ptr, u_ptr, gc_ptr, state_ptr, o_ptr, valid_ptr, T, TP,
                             NV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr,
                             BV: tl.constexpr, HAS_VALID: tl.constexpr):
    """One (value head, BV-wide slice of the value dim): the chunks in order, the (DK, BV) state tile in registers;
    TP = chunks * C, the factor buffers' row count."""
    head = tl.program_id(0)
    keys = tl.arange(0, DK)
    values = tl.program_id(1) * BV + tl.arange(0, BV)
    tile = state_ptr + head * DK * DV + keys[:, None] * DV + values[None, :]
    s = tl.load(tile)
    n = T
    if HAS_VALID:
        n = tl.minimum(n, tl.load(valid_ptr).to(tl.int32))
    i = tl.arange(0, C)
    causal = i[:, None] >= i[None, :]
    start = 0
    while start < n:  # a while loop: see _delta_rule_kernel
        rows = start + i
        live = (rows < n)[:, None]
        q = tl.load(q_ptr + (rows[:, None] * NV + head) * DK + keys[None, :], mask=live, other=0.0)
        k = tl.load(k_ptr + (rows[:, None] * NV + head) * DK + keys[None, :], mask=live, other=0.0)
        factor = head * TP + rows
        w = tl.load(w_ptr + factor[:, None] * DK + keys[None, :])
        u = tl.load(u_ptr + factor[:, None] * DV + values[None, :])
        gc = tl.load(gc_ptr + factor)
        last = tl.load(gc_ptr + head * TP + start + C - 1)
        delta = u - tl.dot(w, s, input_precision="ieee")  # (C, BV)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee")
        scores = tl.where(causal, scores * tl.exp(tl.where(causal, gc[:, None] - gc[None, :], 0.0)), 0.0)
        o = tl.exp(gc)[:, None] * tl.dot(q, s, input_precision="ieee") + tl.dot(scores, delta, input_precision="ieee")
        tl.store(o_ptr + (rows[:, None] * NV + head) * DV + values[None, :], o, mask=(rows < T)[:, None])
        k *= tl.exp(last - gc)[:, None]
        s = tl.exp(last) * s + tl.dot(tl.trans(k), delta, input_precision="ieee")
        start += C
    tl.store(tile, s)


def _chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
             state: torch.Tensor, valid: torch.Tensor | None, out: torch.Tensor) -> None:
    """triton_delta_rule in chunks of CHUNK_ROWS tokens, into out."""
    T, nv, dk = q.shape
    dv, C = v.shape[-1], CHUNK_ROWS
    chunks = -(-T // C)
    w = torch.empty((nv, chunks * C, dk), dtype=torch.float32, device=q.device)
    u = torch.empty((nv, chunks * C, dv), dtype=torch.float32, device=q.device)
    gc = torch.empty((nv, chunks * C), dtype=torch.float32, device=q.device)
    length = state if valid is None else valid
    _chunk_factors_kernel[(nv, chunks)](k, v, beta, g, w, u, gc, length, T, nv, dk, dv, C,
                                        math.gcd(CHUNK_BLOCK, dk, dv), valid is not None, num_warps=CHUNK_WARPS)
    bv = math.gcd(CHUNK_BLOCK, dv)
    _chunk_recurrence_kernel[(nv, dv // bv)](q, k, w, u, gc, state, out, length, T, chunks * C, nv, dk, dv, C, bv,
                                             valid is not None, num_warps=CHUNK_WARPS)


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
    # The kernels index rows as contiguous arrays; the prefill's v is a strided view of the conv output. Without
    # `valid` they never read valid_ptr, so any pointer will do.
    q, k, v, beta, g = q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), g.contiguous()
    if T == 0:  # the recurrent kernel reads its first token before the loop
        return out
    if CHUNK_ROWS and T >= CHUNK_ROWS:
        _chunked(q, k, v, beta, g, state, valid, out)
        return out
    _delta_rule_kernel[(nv, dv // bv)](q, k, v, beta, g, state, out, state if valid is None else valid, T, nv, dk, dv,
                                       bv, valid is not None, num_warps=NUM_WARPS)
    return out
