"""The gated delta rule over a prompt in chunks of CHUNK tokens on the tensor cores: the recurrence's sequential
depth becomes T / CHUNK chunk steps of two small matrix products instead of T token steps of reductions.

The chunk form (the WY/UT representation of Gated DeltaNet, as fla's chunk kernels use): within a chunk with G the
cumulative log-decay and S0 the state entering it, delta = U - W S0 where [W | U] = (I + A)^-1 [beta exp(G) K |
beta V], A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j); then O = exp(G) (Q S0) + (Q K^T . exp(G_i - G_j), j <= i)
delta and S = exp(G_C) S0 + (K . exp(G_C - G))^T delta. Decay differences are only exponentiated for j <= i (<= 1).
Products run at PRECISION: "tf32x3" (three TF32 tensor-core passes: about fp32's precision, as the recurrent
kernel's fp32 state) or "tf32" (one pass, a 10-bit mantissa: finer than the bf16 activations around the rule, and
fewer registers; the teacher-forced gate decides whether it holds).

Three kernels, so that only the state's two products per chunk are sequential:
- factors, every (value head, chunk) in parallel: G, W, U and K . exp(G_C - G). (I + A)^-1 exactly, without a
  power series (with correlated keys, beta near 1 and little decay its terms grow to ~C(n, n / 2) times the result
  and cancel in fp32): the 16-row diagonal blocks by forward substitution, all blocks' row r in one product, then
  merged pairwise, [[P, 0], [Q, R]]^-1 = X - X [[0, 0], [Q, 0]] X with X = diag(P^-1, R^-1), 32 rows then 64;
- the recurrence, per (value head, BLOCK_V value columns): the chunks in order with the (dk, BLOCK_V) state in
  registers, the next STAGES - 1 chunks' factors loading meanwhile; it stores the state entering each chunk and
  replaces U by delta;
- the outputs, every (value head, chunk, BLOCK_V value columns) in parallel, from the chunk's entering state.
With a device row count `valid` the rows from it on are identity steps (zero k, v, beta, g) and their outputs zero.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .chunked_delta_rule_params import BLOCK_V, CHUNK, NUM_WARPS, PRECISION, STAGES

DIAGONAL = 16  # rows of the inverse's blocks solved by substitution: tl.dot's smallest tile
KEY_BLOCK = 64  # key (and in the factors, value) columns per product: full dims (128) in two


@triton.jit
def _rows(n_ptr, T, HAS_VALID: tl.constexpr):
    """The rows that advance the state: T, or the device count `valid` when smaller."""
    n = T
    if HAS_VALID:
        n = tl.minimum(n, tl.load(n_ptr).to(tl.int32))
    return n


@triton.jit
def _unit_lower_inverse(a, C: tl.constexpr, SUB: tl.constexpr, LEVELS: tl.constexpr, PREC: tl.constexpr):
    """(I + a)^-1 for a strictly lower triangular (C, C) tile; C = SUB * 2^LEVELS."""
    i = tl.arange(0, C)
    eye = tl.where(i[:, None] == i[None, :], 1.0, 0.0)
    diagonal = tl.where((i // SUB)[:, None] == (i // SUB)[None, :], a, 0.0)
    inv = eye  # row r of every block: e_r - a_r inv, its earlier rows final
    for r in tl.static_range(1, SUB):
        inv = tl.where((i % SUB)[:, None] == r, eye - tl.dot(diagonal, inv, input_precision=PREC), inv)
    for level in tl.static_range(LEVELS):
        half = SUB << level
        pair = (i // (2 * half))[:, None] == (i // (2 * half))[None, :]
        lower_left = pair & ((i // half) % 2 == 1)[:, None] & ((i // half) % 2 == 0)[None, :]
        corner = tl.dot(tl.where(lower_left, a, 0.0), inv, input_precision=PREC)
        inv -= tl.dot(inv, corner, input_precision=PREC)
    return inv


@triton.jit(do_not_specialize=["T"])
def _factors_kernel(k_ptr, v_ptr, beta_ptr, g_ptr, w_ptr, u_ptr, kd_ptr, gc_ptr, o_ptr, valid_ptr, T, NV: tl.constexpr,
                    DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, SUB: tl.constexpr,
                    LEVELS: tl.constexpr, KB: tl.constexpr, HAS_VALID: tl.constexpr, PREC: tl.constexpr):
    """One (value head, chunk): G, W, U and K . exp(G_C - G) into (NV, chunks * C, .) buffers, KB key or value
    columns at a time (whole (C, DK) tiles spilled registers at full dims). A chunk past the rows has no factors:
    its program stores its rows' outputs as zeros instead (the output kernel skips it), so the output needs no fill
    kernel before."""
    head = tl.program_id(0)
    start = tl.program_id(1) * C
    n = _rows(valid_ptr, T, HAS_VALID)
    if start < n:
        i = tl.arange(0, C)
        rows = start + i
        live = rows < n
        beta = tl.load(beta_ptr + rows * NV + head, mask=live, other=0.0)
        gc = tl.cumsum(tl.load(g_ptr + rows * NV + head, mask=live, other=0.0), axis=0)
        tl.store(gc_ptr + head * tl.num_programs(1) * C + rows, gc)
        block = tl.arange(0, KB)[None, :]
        keys = k_ptr + (rows[:, None] * NV + head) * DK + block
        kk = tl.zeros((C, C), tl.float32)
        for c in tl.static_range(DK // KB):
            k = tl.load(keys + c * KB, mask=live[:, None], other=0.0)
            kk += tl.dot(k, tl.trans(k), input_precision=PREC)
        below = i[:, None] > i[None, :]
        decay = tl.exp(tl.where(below, gc[:, None] - gc[None, :], 0.0))
        inv = _unit_lower_inverse(tl.where(below, beta[:, None] * decay * kk, 0.0), C, SUB, LEVELS, PREC)
        out = (head * tl.num_programs(1) * C + rows)[:, None]
        last = tl.sum(tl.where(i == C - 1, gc, 0.0), axis=0)  # rows past n add no decay: G_C is the last live row's
        for c in tl.static_range(DK // KB):
            k = tl.load(keys + c * KB, mask=live[:, None], other=0.0)
            tl.store(w_ptr + out * DK + c * KB + block,
                     tl.dot(inv, k * (beta * tl.exp(gc))[:, None], input_precision=PREC))
            tl.store(kd_ptr + out * DK + c * KB + block, k * tl.exp(last - gc)[:, None])
        for c in tl.static_range(DV // KB):
            v = tl.load(v_ptr + (rows[:, None] * NV + head) * DV + c * KB + block, mask=live[:, None], other=0.0)
            tl.store(u_ptr + out * DV + c * KB + block, tl.dot(inv, v * beta[:, None], input_precision=PREC))
    else:
        rows = start + tl.arange(0, C)
        for c in tl.static_range(DV // KB):
            tl.store(o_ptr + (rows[:, None] * NV + head) * DV + c * KB + tl.arange(0, KB)[None, :],
                     tl.zeros((C, KB), tl.float32), mask=(rows < T)[:, None])


@triton.jit(do_not_specialize=["TP"])
def _recurrence_kernel(w_ptr, u_ptr, kd_ptr, gc_ptr, state_ptr, h_ptr, valid_ptr, TP, NV: tl.constexpr,
                       DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, KB: tl.constexpr,
                       HAS_VALID: tl.constexpr, PREC: tl.constexpr, STAGES: tl.constexpr):
    """One (value head, BV value columns): the chunks in order, the (DK, BV) state in registers as two (KB, BV)
    halves when DK = 2 KB (each product's operands then half as large: one (DK, BV) tile spilled registers at
    full dims); TP = the factor buffers' rows (chunks * C). Stores each chunk's entering state into h (NV, chunks,
    DK, DV) and its delta over U."""
    head = tl.program_id(0)
    values = tl.program_id(1) * BV + tl.arange(0, BV)
    half = tl.arange(0, KB)
    tile = half[:, None] * DV + values[None, :]
    state = state_ptr + head * DK * DV
    s_a = tl.load(state + tile)
    if DK > KB:
        s_b = tl.load(state + KB * DV + tile)
    n = _rows(valid_ptr, TP, HAS_VALID)
    # over every chunk of the bucket, those from `n` on identity steps (their factors, never written, masked to
    # zero): a loop with a host trip count, so Triton's pipeliner loads the next chunk's factors while this one
    # computes (session 29's H100: with each load a round trip between the products, ~11 us a step)
    for chunk in tl.range(0, TP // C, num_stages=STAGES):
        start = chunk * C
        live = start < n
        factor = (head * TP + start + tl.arange(0, C))[:, None]
        u = tl.load(u_ptr + factor * DV + values[None, :], mask=live, other=0.0)
        w_a = tl.load(w_ptr + factor * DK + half[None, :], mask=live, other=0.0)
        kd_a = tl.load(kd_ptr + factor * DK + half[None, :], mask=live, other=0.0)
        decay = tl.exp(tl.load(gc_ptr + head * TP + start + C - 1, mask=live, other=0.0))
        entering = h_ptr + (head * (TP // C) + chunk) * DK * DV
        tl.store(entering + tile, s_a)
        delta = u - tl.dot(w_a, s_a, input_precision=PREC)  # (C, BV)
        if DK > KB:
            w_b = tl.load(w_ptr + factor * DK + KB + half[None, :], mask=live, other=0.0)
            kd_b = tl.load(kd_ptr + factor * DK + KB + half[None, :], mask=live, other=0.0)
            tl.store(entering + KB * DV + tile, s_b)
            delta -= tl.dot(w_b, s_b, input_precision=PREC)
        tl.store(u_ptr + factor * DV + values[None, :], delta)
        s_a = decay * s_a + tl.dot(tl.trans(kd_a), delta, input_precision=PREC)
        if DK > KB:
            s_b = decay * s_b + tl.dot(tl.trans(kd_b), delta, input_precision=PREC)
    tl.store(state + tile, s_a)
    if DK > KB:
        tl.store(state + KB * DV + tile, s_b)


@triton.jit(do_not_specialize=["T", "TP"])
def _output_kernel(q_ptr, k_ptr, delta_ptr, gc_ptr, h_ptr, o_ptr, valid_ptr, T, TP, NV: tl.constexpr,
                   DK: tl.constexpr, DV: tl.constexpr, C: tl.constexpr, BV: tl.constexpr, KB: tl.constexpr,
                   HAS_VALID: tl.constexpr, PREC: tl.constexpr):
    """One (value head, chunk, BV value columns): O = exp(G) (Q S0) + (Q K^T . exp(G_i - G_j), j <= i) delta, the
    key dim in KB halves as the recurrence has it. Rows past n have zero q: their outputs are stored as zeros (the
    factors kernel zeroes the chunks past n)."""
    head, chunk = tl.program_id(0), tl.program_id(1)
    start = chunk * C
    n = _rows(valid_ptr, T, HAS_VALID)
    if start < n:
        i = tl.arange(0, C)
        rows = start + i
        live = (rows < n)[:, None]
        half = tl.arange(0, KB)
        values = tl.program_id(2) * BV + tl.arange(0, BV)
        inputs = (rows[:, None] * NV + head) * DK + half[None, :]
        entering = h_ptr + (head * (TP // C) + chunk) * DK * DV + half[:, None] * DV + values[None, :]
        q = tl.load(q_ptr + inputs, mask=live, other=0.0)
        scores = tl.dot(q, tl.trans(tl.load(k_ptr + inputs, mask=live, other=0.0)), input_precision=PREC)
        past = tl.dot(q, tl.load(entering), input_precision=PREC)
        if DK > KB:
            q = tl.load(q_ptr + inputs + KB, mask=live, other=0.0)
            scores += tl.dot(q, tl.trans(tl.load(k_ptr + inputs + KB, mask=live, other=0.0)), input_precision=PREC)
            past += tl.dot(q, tl.load(entering + KB * DV), input_precision=PREC)
        gc = tl.load(gc_ptr + head * TP + rows)
        causal = i[:, None] >= i[None, :]
        scores = tl.where(causal, scores * tl.exp(tl.where(causal, gc[:, None] - gc[None, :], 0.0)), 0.0)
        delta = tl.load(delta_ptr + (head * TP + rows)[:, None] * DV + values[None, :])
        o = tl.exp(gc)[:, None] * past + tl.dot(scores, delta, input_precision=PREC)
        tl.store(o_ptr + (rows[:, None] * NV + head) * DV + values[None, :], o, mask=(rows < T)[:, None])


def chunked_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
                       state: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """deltanet.delta_rule in chunks: q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), fp32; updates state
    (nv, dk, dv) fp32 in place. Returns o (T, nv, dv). With `valid` ((1,) int64 on the device) only the first
    `valid` tokens advance the state and the outputs of the rest are zero. No host syncs: graph-capturable."""
    T, nv, dk = q.shape
    dv = v.shape[-1]
    bv = math.gcd(BLOCK_V, dv)
    if dk & (dk - 1) or dv & (dv - 1) or min(dk, bv) < 16 or dk > 2 * KEY_BLOCK:
        raise ValueError(f"chunked_delta_rule tiles a head with tl.arange and tl.dot: dk={dk} and dv={dv} must be "
                         f"powers of two, dk and the value block at least 16, dk at most {2 * KEY_BLOCK}")
    if not (state.is_contiguous() and state.dtype == torch.float32):
        raise ValueError("chunked_delta_rule updates the state in place: it must be a contiguous fp32 tensor")
    out = torch.empty((T, nv, dv), dtype=torch.float32, device=q.device)  # every row written, zeros past `valid`
    if T == 0:
        return out
    q, k, v, beta, g = q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous(), g.contiguous()
    chunks = -(-T // CHUNK)
    f32 = {"dtype": torch.float32, "device": q.device}
    w, kd = torch.empty((nv, chunks * CHUNK, dk), **f32), torch.empty((nv, chunks * CHUNK, dk), **f32)
    u, gc = torch.empty((nv, chunks * CHUNK, dv), **f32), torch.empty((nv, chunks * CHUNK), **f32)
    entering = torch.empty((nv, chunks, dk, dv), **f32)
    # the factors of chunks past `valid` are never written, and read only masked
    length = state if valid is None else valid  # without `valid` the kernels never read it: any pointer will do
    flags = (valid is not None, PRECISION)
    sub = min(DIAGONAL, CHUNK)
    _factors_kernel[(nv, chunks)](k, v, beta, g, w, u, kd, gc, out, length, T, nv, dk, dv, CHUNK, sub,
                                  (CHUNK // sub).bit_length() - 1, min(dk, dv, KEY_BLOCK), *flags, num_warps=NUM_WARPS)
    _recurrence_kernel[(nv, dv // bv)](w, u, kd, gc, state, entering, length, chunks * CHUNK, nv, dk, dv, CHUNK, bv,
                                       min(dk, KEY_BLOCK), *flags, STAGES, num_warps=NUM_WARPS)
    _output_kernel[(nv, chunks, dv // bv)](q, k, u, gc, entering, out, length, T, chunks * CHUNK, nv, dk, dv, CHUNK,
                                           bv, min(dk, KEY_BLOCK), *flags, num_warps=NUM_WARPS)
    return out
