"""The prefill's Gated DeltaNet front, from the in-projection's q|k|v, b and a columns to the delta rule's inputs,
as one Triton kernel per layer call: the causal depthwise conv (the state's last kernel - 1 inputs as left context)
and SiLU, each rounded to the activations' dtype as the reference's conv and silu are; q and k L2-normalised per
key head (q also times dk^-0.5) and repeated to the value heads; beta = sigmoid(b), g = -exp(A_log) *
softplus(a + dt_bias); and the conv state the next call continues from (the inputs before row `valid`, or before
the end). One program per (block of BLOCK_T rows, value head): the rows are independent, so there is no
sequential step here; the recurrence stays in the delta rule's kernel. Inputs are read where the projection wrote
them (any row stride), so nothing is concatenated or copied on the way.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .deltanet_prep_params import BLOCK_T, NUM_WARPS


@triton.jit
def _window(rows_ptr, stride, state_ptr, channel, src, T, C: tl.constexpr, D: tl.constexpr, KS: tl.constexpr):
    """(rows, D) channels from `channel` of the conv window's rows `src` ((rows, 1)), counted from the call's first
    row: a row before it (src < 0) is the state's row KS - 1 + src; rows from T on are zero. In the rows' dtype.
    Row indices stay 2-D from the start: a 1-D index expanded to 2-D costs a layout conversion, a block barrier
    between one tap's loads and the next's."""
    i = tl.arange(0, D)[None, :]
    row = tl.load(rows_ptr + src * stride + i, mask=(src >= 0) & (src < T) & (i < D), other=0.0)
    old = tl.load(state_ptr + (KS - 1 + src) * C + channel + i, mask=(src < 0) & (i < D), other=0.0)
    return row + old  # one of the two is zero: exact


@triton.jit
def _conv_silu(rows_ptr, stride, state_ptr, w_ptr, t, T, channel, C: tl.constexpr, D: tl.constexpr,
               KS: tl.constexpr):
    """silu(conv) at rows t ((rows, 1)) for D channels from `channel`: (rows, D) fp32 holding values of the rows'
    dtype."""
    weights = w_ptr + channel + tl.arange(0, D)[None, :]  # the taps (KS, C): contiguous like the rows
    acc = tl.zeros((t.shape[0], D), tl.float32)
    for j in tl.static_range(KS):  # tap j reads window row t + j - (KS - 1)
        x = _window(rows_ptr, stride, state_ptr, channel, t + j - (KS - 1), T, C, D, KS).to(tl.float32)
        acc += x * tl.load(weights + j * C).to(tl.float32)
    dt = rows_ptr.dtype.element_ty
    conv = acc.to(dt).to(tl.float32)
    return (conv / (1.0 + tl.exp(-conv))).to(dt).to(tl.float32)


@triton.jit
def _carry(rows_ptr, stride, state_ptr, conv_ptr, channel, n, T, C: tl.constexpr, D: tl.constexpr,
           KS: tl.constexpr, KP: tl.constexpr):
    """The next conv state's D channels from `channel`: the window's rows n .. n + KS - 2 (KP: KS - 1 rounded up
    to a power of two)."""
    r = tl.arange(0, KP)[:, None]
    rows = _window(rows_ptr, stride, state_ptr, channel, n + r - (KS - 1), T, C, D, KS)
    i = tl.arange(0, D)[None, :]
    tl.store(conv_ptr + r * C + channel + i, rows, mask=(r < KS - 1) & (i < D))


@triton.jit(do_not_specialize=["T"])
def _prep_kernel(q_ptr, k_ptr, v_ptr, b_ptr, a_ptr, q_stride, k_stride, v_stride, b_stride, a_stride, state_ptr,
                 w_ptr, a_log_ptr, dt_bias_ptr, valid_ptr, qo_ptr, ko_ptr, vo_ptr, beta_ptr, g_ptr, conv_ptr, T,
                 scale, NV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KD: tl.constexpr, C: tl.constexpr,
                 REPEAT: tl.constexpr, KS: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr,
                 HAS_VALID: tl.constexpr):
    """One (block of ROWS rows, value head). C: the conv's channels, q | k | v (2 KD + NV DV)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]  # (ROWS, 1): see _window
    h = tl.program_id(1)
    hk = h // REPEAT  # value head h reads key head h // REPEAT
    q = _conv_silu(q_ptr + hk * DK, q_stride, state_ptr, w_ptr, rows, T, hk * DK, C, DK, KS)
    k = _conv_silu(k_ptr + hk * DK, k_stride, state_ptr, w_ptr, rows, T, KD + hk * DK, C, DK, KS)
    v = _conv_silu(v_ptr + h * DV, v_stride, state_ptr, w_ptr, rows, T, 2 * KD + h * DV, C, DV, KS)
    q = q / tl.maximum(tl.sqrt(tl.sum(q * q, axis=1)), 1e-12)[:, None] * scale  # F.normalize, then dk^-0.5
    k = k / tl.maximum(tl.sqrt(tl.sum(k * k, axis=1)), 1e-12)[:, None]
    keys, values = tl.arange(0, DK)[None, :], tl.arange(0, DV)[None, :]
    tl.store(qo_ptr + (rows * NV + h) * DK + keys, q, mask=(rows < T) & (keys < DK))
    tl.store(ko_ptr + (rows * NV + h) * DK + keys, k, mask=(rows < T) & (keys < DK))
    tl.store(vo_ptr + (rows * NV + h) * DV + values, v, mask=(rows < T) & (values < DV))
    t = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live, out = t < T, t * NV + h
    b = tl.load(b_ptr + t * b_stride + h, mask=live, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + t * a_stride + h, mask=live, other=0.0).to(tl.float32)
    a += tl.load(dt_bias_ptr + h).to(tl.float32)
    tl.store(beta_ptr + out, 1.0 / (1.0 + tl.exp(-b)), mask=live)
    softplus = tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(a)))  # torch's threshold
    tl.store(g_ptr + out, -tl.exp(tl.load(a_log_ptr + h).to(tl.float32)) * softplus, mask=live)
    if tl.program_id(0) == 0:  # the next conv state: window rows n .. n + KS - 2, n the rows that advance the state
        n = T
        if HAS_VALID:
            n = tl.minimum(n, tl.load(valid_ptr).to(tl.int32))
        _carry(v_ptr + h * DV, v_stride, state_ptr, conv_ptr, 2 * KD + h * DV, n, T, C, DV, KS, KP)
        if h % REPEAT == 0:  # one writer per key head
            _carry(q_ptr + hk * DK, q_stride, state_ptr, conv_ptr, hk * DK, n, T, C, DK, KS, KP)
            _carry(k_ptr + hk * DK, k_stride, state_ptr, conv_ptr, KD + hk * DK, n, T, C, DK, KS, KP)


def deltanet_prep(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                  conv_taps: torch.Tensor, conv_state: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
                  valid: torch.Tensor | None, key_dim: int) -> tuple[torch.Tensor, ...]:
    """The delta rule's inputs and the next conv state from the in-projection's columns: q, k (T, nk * dk),
    v (T, nv * dv), b, a (T, nv), each with unit column stride; conv_taps (kernel, channels) contiguous; conv_state
    (kernel - 1, channels), the inputs before the call. Returns q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv),
    all fp32 and contiguous, and the next conv state (kernel - 1, channels)."""
    T, nv = b.shape
    dk, dv = key_dim, v.shape[1] // nv
    nk, ks = q.shape[1] // dk, conv_taps.shape[0]
    if dk & (dk - 1) or dv & (dv - 1):
        raise ValueError(f"deltanet_prep spans a head with one tl.arange: dk={dk} and dv={dv} must be powers of two")
    if any(t.stride(1) != 1 for t in (q, k, v, b, a)):
        raise ValueError("deltanet_prep reads the projection's columns at unit stride")
    conv_state = conv_state.contiguous()
    if not conv_taps.is_contiguous():
        raise ValueError("deltanet_prep reads the conv's taps as a contiguous (kernel, channels) array")
    f32 = {"dtype": torch.float32, "device": q.device}
    qo, ko = torch.empty((T, nv, dk), **f32), torch.empty((T, nv, dk), **f32)
    vo = torch.empty((T, nv, dv), **f32)
    beta, g = torch.empty((T, nv), **f32), torch.empty((T, nv), **f32)
    conv = torch.empty_like(conv_state)
    # without `valid` the kernel never reads valid_ptr: any pointer will do
    # at least one block: it also carries the conv state
    _prep_kernel[(max(1, triton.cdiv(T, BLOCK_T)), nv)](q, k, v, b, a, q.stride(0), k.stride(0), v.stride(0), b.stride(0),
                                                a.stride(0), conv_state, conv_taps, a_log, dt_bias,
                                                conv_state if valid is None else valid, qo, ko, vo, beta, g, conv, T,
                                                dk ** -0.5, nv, dk, dv, nk * dk, conv_state.shape[1], nv // nk, ks,
                                                triton.next_power_of_2(ks - 1), BLOCK_T, valid is not None,
                                                num_warps=NUM_WARPS)
    return qo, ko, vo, beta, g, conv
