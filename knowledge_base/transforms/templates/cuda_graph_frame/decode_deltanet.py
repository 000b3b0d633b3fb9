"""One-token Gated DeltaNet step on the static conv and recurrent state (in place): the reference's T = 1 case
of the causal conv and the delta rule, with q|k|v|z|b|a from one projection.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.config import BackboneConfig

from .decode_weights import DeltaNetWeights
from .kv_cache import DeltaNetState
from .layers import gated_rms_norm


def deltanet_decode(x: torch.Tensor, w: DeltaNetWeights, cfg: BackboneConfig, state: DeltaNetState) -> torch.Tensor:
    """x (1, hidden) -> (1, hidden); advances `state` by one token."""
    nk, nv, dk, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, \
        cfg.linear_value_head_dim
    kd, vd = nk * dk, nv * dv
    qkvz, ba = w.proj(x)
    mixed, z = qkvz[0].split((2 * kd + vd, vd))
    b, a = ba[0].split((nv, nv))
    window = torch.cat((state.conv, mixed[None]))  # (kernel, channels), oldest row first
    state.conv.copy_(window[1:])
    conv = (window.float() * w.conv.float()).sum(0).to(x.dtype)
    q, k, v = F.silu(conv).float().split((kd, kd, vd))
    repeat = nv // nk  # value head h reads key head h // repeat
    q = (F.normalize(q.view(nk, 1, dk), dim=-1) * dk ** -0.5).expand(nk, repeat, dk).reshape(nv, dk)
    k = F.normalize(k.view(nk, 1, dk), dim=-1).expand(nk, repeat, dk).reshape(nv, dk)
    beta = torch.sigmoid(b.float())
    g = w.neg_a * F.softplus(a.float() + w.dt_bias)
    s = state.recurrent  # (nv, dk, dv) fp32
    s.mul_(torch.exp(g)[:, None, None])
    predicted = torch.bmm(k[:, None, :], s)[:, 0]  # (nv, dv)
    delta = (v.view(nv, dv) - predicted) * beta[:, None]
    s.baddbmm_(k[:, :, None], delta[:, None, :])
    o = torch.bmm(q[:, None, :], s)[:, 0]
    o = gated_rms_norm(o.to(x.dtype), z.view(nv, dv), w.norm, cfg.rms_norm_eps)
    return F.linear(o.reshape(1, vd), w.out_proj)
