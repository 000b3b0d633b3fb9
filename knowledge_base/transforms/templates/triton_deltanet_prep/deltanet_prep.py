"""The prefill's Gated DeltaNet front, from the in-projection's q|k|v, b and a columns to the delta rule's inputs,
as one Triton kernel per layer call: the causal depthwise conv (the state's last kernel - 1 inputs as left context)
and SiLU, each rounded to the activations' dtype as the reference's conv and silu are; q and k L2-normalised per
key head (q also times dk^-0.5) and repeated to the value heads; beta = sigmoid(b), g = -exp(A_log) *
softplus(a + dt_bias); and the conv state the next call continues from (the inputs before row `valid`, or before
the end). One program per (row, value head): the rows are independent, so there is no sequential step here; the
recurrence stays in triton_deltanet's kernel. Inputs are read where the projection wrote them (any row stride),
so nothing is concatenated or copied on the way.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .deltanet_prep_params import NUM_WARPS


@triton.jit
def _window_row(rows_ptr, stride, state_ptr, channel, src, C: tl.constexpr, D: tl.constexpr, KS: tl.constexpr):
    """D channels from `channel` of the conv window's row `src`, counted from the call's first row: a row before
    it (src < 0) is the state's row KS - 1 + src. In the rows' dtype."""
    i = tl.arange(0, D)
    row = tl.load(rows_ptr + src * stride + i, mask=(i < D) & (src >= 0), other=0.0)
    old = tl.load(state_ptr + (KS - 1 + src) * C + channel + i, mask=(i < D) & (src < 0), other=0.0)
    return row + old  # one of the two is zero: exact


@triton.jit
def _conv_silu(rows_ptr, stride, state_ptr, w_ptr, t, channel, C: tl.constexpr, D: tl.constexpr,
               KS: tl.constexpr):
    """silu(conv) at row t for D channels from `channel`, fp32 holding values of the rows' dtype."""
    i = tl.arange(0, D)
    acc = tl.zeros((D,), tl.float32)
    for j in tl.static_range(KS):  # tap j reads window row t + j - (KS - 1)
        x = _window_row(rows_ptr, stride, state_ptr, channel, t + j - (KS - 1), C, D, KS).to(tl.float32)
        acc += x * tl.load(w_ptr + (channel + i) * KS + j).to(tl.float32)
    dt = rows_ptr.dtype.element_ty
    conv = acc.to(dt).to(tl.float32)
    return (conv / (1.0 + tl.exp(-conv))).to(dt).to(tl.float32)


@triton.jit
def _carry(rows_ptr, stride, state_ptr, conv_ptr, channel, src, t, C: tl.constexpr, D: tl.constexpr,
           KS: tl.constexpr):
    """The next conv state's row t, D channels from `channel`: the window's row src."""
    i = tl.arange(0, D)
    tl.store(conv_ptr + t * C + channel + i, _window_row(rows_ptr, stride, state_ptr, channel, src, C, D, KS))


@triton.jit(do_not_specialize=["T"])
def _prep_kernel(q_ptr, k_ptr, v_ptr, b_ptr, a_ptr, q_stride, k_stride, v_stride, b_stride, a_stride, state_ptr,
                 w_ptr, a_log_ptr, dt_bias_ptr, valid_ptr, qo_ptr, ko_ptr, vo_ptr, beta_ptr, g_ptr, conv_ptr, T,
                 scale, NV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KD: tl.constexpr, C: tl.constexpr,
                 REPEAT: tl.constexpr, KS: tl.constexpr, HAS_VALID: tl.constexpr):
    """C: the conv's channels, q | k | v (2 KD + NV DV)."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // REPEAT  # value head h reads key head h // REPEAT
    if t < T:
        q = _conv_silu(q_ptr + hk * DK, q_stride, state_ptr, w_ptr, t, hk * DK, C, DK, KS)
        k = _conv_silu(k_ptr + hk * DK, k_stride, state_ptr, w_ptr, t, KD + hk * DK, C, DK, KS)
        v = _conv_silu(v_ptr + h * DV, v_stride, state_ptr, w_ptr, t, 2 * KD + h * DV, C, DV, KS)
        q = q / tl.maximum(tl.sqrt(tl.sum(q * q, axis=0)), 1e-12) * scale  # F.normalize, then dk^-0.5
        k = k / tl.maximum(tl.sqrt(tl.sum(k * k, axis=0)), 1e-12)
        out = t * NV + h
        tl.store(qo_ptr + out * DK + tl.arange(0, DK), q)
        tl.store(ko_ptr + out * DK + tl.arange(0, DK), k)
        tl.store(vo_ptr + out * DV + tl.arange(0, DV), v)
        b = tl.load(b_ptr + t * b_stride + h).to(tl.float32)
        a = tl.load(a_ptr + t * a_stride + h).to(tl.float32) + tl.load(dt_bias_ptr + h).to(tl.float32)
        tl.store(beta_ptr + out, 1.0 / (1.0 + tl.exp(-b)))
        softplus = tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(a)))  # torch's threshold
        tl.store(g_ptr + out, -tl.exp(tl.load(a_log_ptr + h).to(tl.float32)) * softplus)
    if t < KS - 1:  # the next conv state: window rows n .. n + KS - 2, n the rows that advance the state
        n = T
        if HAS_VALID:
            n = tl.minimum(n, tl.load(valid_ptr).to(tl.int32))
        src = n + t - (KS - 1)
        _carry(v_ptr + h * DV, v_stride, state_ptr, conv_ptr, 2 * KD + h * DV, src, t, C, DV, KS)
        if h % REPEAT == 0:  # one writer per key head
            _carry(q_ptr + hk * DK, q_stride, state_ptr, conv_ptr, hk * DK, src, t, C, DK, KS)
            _carry(k_ptr + hk * DK, k_stride, state_ptr, conv_ptr, KD + hk * DK, src, t, C, DK, KS)


def deltanet_prep(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                  conv_weight: torch.Tensor, conv_state: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
                  valid: torch.Tensor | None, key_dim: int) -> tuple[torch.Tensor, ...]:
    """The delta rule's inputs and the next conv state from the in-projection's columns: q, k (T, nk * dk),
    v (T, nv * dv), b, a (T, nv), each with unit column stride; conv_weight (channels, 1, kernel); conv_state
    (kernel - 1, channels), the inputs before the call. Returns q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv),
    all fp32 and contiguous, and the next conv state (kernel - 1, channels)."""
    T, nv = b.shape
    dk, dv = key_dim, v.shape[1] // nv
    nk, ks = q.shape[1] // dk, conv_weight.shape[-1]
    if dk & (dk - 1) or dv & (dv - 1):
        raise ValueError(f"deltanet_prep spans a head with one tl.arange: dk={dk} and dv={dv} must be powers of two")
    if any(t.stride(1) != 1 for t in (q, k, v, b, a)):
        raise ValueError("deltanet_prep reads the projection's columns at unit stride")
    conv_state, conv_weight = conv_state.contiguous(), conv_weight.contiguous()
    f32 = {"dtype": torch.float32, "device": q.device}
    qo, ko = torch.empty((T, nv, dk), **f32), torch.empty((T, nv, dk), **f32)
    vo = torch.empty((T, nv, dv), **f32)
    beta, g = torch.empty((T, nv), **f32), torch.empty((T, nv), **f32)
    conv = torch.empty_like(conv_state)
    # without `valid` the kernel never reads valid_ptr: any pointer will do
    _prep_kernel[(max(T, ks - 1), nv)](q, k, v, b, a, q.stride(0), k.stride(0), v.stride(0), b.stride(0),
                                       a.stride(0), conv_state, conv_weight, a_log, dt_bias,
                                       conv_state if valid is None else valid, qo, ko, vo, beta, g, conv, T,
                                       dk ** -0.5, nv, dk, dv, nk * dk, conv_state.shape[1], nv // nk, ks,
                                       valid is not None, num_warps=NUM_WARPS)
    return qo, ko, vo, beta, g, conv
