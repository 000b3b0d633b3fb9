"""One Gated DeltaNet layer of the graphed decode frame (decode_step's `x + deltanet_decode(norm(x))` for one row)
as three Triton kernels instead of ~40 torch kernels, because the captured frame is bound by its kernel count:
(1) triton_tower's norm_gemv: input_layernorm in the prologue, then the rows of the fused qkvz|ba projection;
(2) the step: per (value head, BV-wide slice of the value dim): the causal conv over the window (state rows, then
    the new row) with SiLU for the head's q, k and v channels, q/k L2 norms, beta and the decay g, and the delta
    rule on the (dk, BV) fp32 state tile, writing the head's output slice;
(3) out: every program recomputes the gated RMSNorm of each head's output (the GEMV's input chunks are whole
    heads, so a head's RMS comes from the values its chunk loads anyway), then its rows of out_proj plus the
    residual, the products accumulated elementwise and reduced once after the last chunk (as triton_tower's
    residual GEMV: a reduction per chunk halved the bandwidth of this shape on the H200). Its programs also
    advance the conv window: programs of (2) that share a key head read the same q/k conv rows, so no program of
    (2) may shift them, and (3) starts only after all of (2) has read them.
Sums in fp32; values are rounded to the activation dtype wherever the torch step rounds them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.config import BackboneConfig

from .decode_weights import LayerWeights
from .kv_cache import DeltaNetState
from .triton_deltanet_step_params import BLOCK_V, NUM_WARPS, OUT_BLOCK_K, OUT_BLOCK_N, OUT_WARPS
from .triton_tower import _block, _check, norm_gemv


@triton.jit
def _silu_conv(conv_ptr, w_ptr, new_ptr, ch, C: tl.constexpr, KS: tl.constexpr):
    """SiLU of the causal conv at channels `ch` over the KS-row window (KS - 1 state rows, oldest first, then the
    new row), in fp32, rounded where the torch step rounds: the window sum, then the SiLU."""
    acc = tl.load(conv_ptr + ch).to(tl.float32) * tl.load(w_ptr + ch).to(tl.float32)  # row by row, as torch sums
    for j in tl.static_range(1, KS - 1):
        acc += tl.load(conv_ptr + j * C + ch).to(tl.float32) * tl.load(w_ptr + j * C + ch).to(tl.float32)
    acc += tl.load(new_ptr + ch).to(tl.float32) * tl.load(w_ptr + (KS - 1) * C + ch).to(tl.float32)
    dt = new_ptr.dtype.element_ty
    x = acc.to(dt).to(tl.float32)
    return (x / (1.0 + tl.exp(-x))).to(dt).to(tl.float32)


@triton.jit
def _unit(x):
    """x / max(|x|, 1e-12), as F.normalize."""
    return x / tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), 1e-12)


@triton.jit
def _step_kernel(proj_ptr, conv_ptr, conv_w_ptr, neg_a_ptr, dt_bias_ptr, state_ptr, o_ptr, q_scale,
                 NK: tl.constexpr, NV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KS: tl.constexpr,
                 BV: tl.constexpr):
    head = tl.program_id(0)
    KD: tl.constexpr = NK * DK
    VD: tl.constexpr = NV * DV
    C: tl.constexpr = 2 * KD + VD
    key_head = head // (NV // NK)  # value head h reads key head h // repeat
    keys = tl.arange(0, DK)
    values = tl.program_id(1) * BV + tl.arange(0, BV)
    q = _unit(_silu_conv(conv_ptr, conv_w_ptr, proj_ptr, key_head * DK + keys, C, KS)) * q_scale
    k = _unit(_silu_conv(conv_ptr, conv_w_ptr, proj_ptr, KD + key_head * DK + keys, C, KS))
    v = _silu_conv(conv_ptr, conv_w_ptr, proj_ptr, 2 * KD + head * DV + values, C, KS)
    beta = tl.sigmoid(tl.load(proj_ptr + 2 * KD + 2 * VD + head).to(tl.float32))
    a = tl.load(proj_ptr + 2 * KD + 2 * VD + NV + head).to(tl.float32) + tl.load(dt_bias_ptr + head)
    g = tl.load(neg_a_ptr + head) * tl.where(a > 20.0, a, tl.log(1.0 + tl.exp(a)))  # softplus, threshold 20
    tile = state_ptr + head * DK * DV + keys[:, None] * DV + values[None, :]
    s = tl.load(tile) * tl.exp(g)
    delta = (v - tl.sum(s * k[:, None], axis=0)) * beta
    s += k[:, None] * delta[None, :]
    tl.store(tile, s)
    tl.store(o_ptr + head * DV + values, tl.sum(s * q[:, None], axis=0).to(o_ptr.dtype.element_ty))


@triton.jit
def _out_kernel(o_ptr, z_ptr, gamma_ptr, w_ptr, res_ptr, y_ptr, conv_ptr, new_ptr, eps, NV: tl.constexpr,
                DV: tl.constexpr, C: tl.constexpr, KS: tl.constexpr, CB: tl.constexpr, BN: tl.constexpr,
                HB: tl.constexpr):
    """y = res + out_proj @ (RMSNorm(o) * gamma * silu(z) per head), HB heads per unrolled chunk; this program's
    CB channels of the conv window shifted by one row, the new row last."""
    program = tl.program_id(0)
    dt = y_ptr.dtype.element_ty
    rows = program * BN + tl.arange(0, BN)
    # every load before the first reduction (the head norms'), whose barrier would hold the loads behind it back
    tiles, o_chunks, z_chunks = (), (), ()
    for c in tl.static_range(NV // HB):
        cols = (c * HB + tl.arange(0, HB))[:, None] * DV + tl.arange(0, DV)[None, :]  # (HB heads, DV)
        tiles = tiles + (tl.load(w_ptr + rows[:, None, None] * (NV * DV) + cols[None, :, :]),)  # (BN, HB, DV)
        o_chunks = o_chunks + (tl.load(o_ptr + cols),)
        z_chunks = z_chunks + (tl.load(z_ptr + cols),)
    gamma = tl.load(gamma_ptr + tl.arange(0, DV)).to(tl.float32)
    res = tl.load(res_ptr + rows)
    ch = program * CB + tl.arange(0, CB)
    live = ch < C
    for j in tl.static_range(KS - 2):  # each thread loads row j + 1 of its channels before it overwrites it
        tl.store(conv_ptr + j * C + ch, tl.load(conv_ptr + (j + 1) * C + ch, mask=live), mask=live)
    tl.store(conv_ptr + (KS - 2) * C + ch, tl.load(new_ptr + ch, mask=live), mask=live)

    acc = tl.zeros((BN, HB, DV), tl.float32)
    for c in tl.static_range(NV // HB):
        o = o_chunks[c].to(tl.float32)
        z = z_chunks[c].to(tl.float32)
        normed = o * tl.rsqrt(tl.sum(o * o, axis=1) / DV + eps)[:, None] * gamma[None, :]
        a = (normed * (z / (1.0 + tl.exp(-z)))).to(dt).to(tl.float32)
        acc += tiles[c].to(tl.float32) * a[None, :, :]
    out = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(y_ptr + rows, (res.to(tl.float32) + out.to(dt).to(tl.float32)).to(dt))


def deltanet_step(x: torch.Tensor, lw: LayerWeights, cfg: BackboneConfig, state: DeltaNetState) -> torch.Tensor:
    """x + deltanet_decode(norm(x, input_gain)) for x (1, hidden), advancing `state` in place: three launches."""
    w = lw.mixer
    nk, nv, dk, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, \
        cfg.linear_value_head_dim
    kd, vd, kernel, hidden = nk * dk, nv * dv, cfg.linear_conv_kernel, x.shape[-1]
    channels = 2 * kd + vd
    _check(x, w.conv, w.out_proj, state.conv, state.recurrent)
    for dim in (dk, dv):
        _block(dim, dim)  # both are tl.arange lengths
    if kernel < 2:
        raise ValueError(f"triton_backbone_deltanet: a conv kernel of {kernel} rows keeps no window")
    proj = norm_gemv(x, lw.input_gain, w.proj, cfg.rms_norm_eps, swiglu=False)  # q|k|v|z|b|a
    o = torch.empty(vd, dtype=x.dtype, device=x.device)
    bv = _block(dv, BLOCK_V)
    _step_kernel[(nv, dv // bv)](proj, state.conv, w.conv, w.neg_a, w.dt_bias, state.recurrent, o, dk ** -0.5,
                                 nk, nv, dk, dv, kernel, bv, num_warps=NUM_WARPS)
    bn = _block(hidden, OUT_BLOCK_N)
    programs = hidden // bn
    y = torch.empty_like(x)
    _out_kernel[(programs,)](o, proj[channels:], w.norm, w.out_proj, x, y, state.conv, proj, cfg.rms_norm_eps,
                             nv, dv, channels, kernel, triton.next_power_of_2(triton.cdiv(channels, programs)), bn,
                             _block(nv, max(1, OUT_BLOCK_K // dv)), num_warps=OUT_WARPS)
    return y
