"""Gated DeltaNet (Qwen3-Next style linear attention), 3 of every 4 backbone layers.

in_proj_qkvz -> q, k, v, z and in_proj_ba -> b, a; a causal depthwise conv (kernel 4) + SiLU over [q|k|v];
q, k L2-normalised per head (q also scaled by dk^-0.5), key heads repeated to the value heads;
beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); per token the fp32 state S (nv, dk, dv) does
S = exp(g) S;  S += beta k (v - S^T k)^T;  o = S^T q.  Output: gated RMSNorm(o, silu(z)) -> out_proj.
The recurrence runs token by token in both prefill and decode: it is the oracle, so clarity over speed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights
from reference_runtime.config import BackboneConfig

from .kv_cache import DeltaNetState
from .layers import gated_rms_norm, take


def delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
               state: torch.Tensor) -> torch.Tensor:
    """q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), all fp32; updates state (nv, dk, dv) in place.
    Returns o (T, nv, dv)."""
    out = []
    for t in range(q.shape[0]):
        state.mul_(torch.exp(g[t])[:, None, None])
        predicted = torch.einsum("hkv,hk->hv", state, k[t])
        delta = (v[t] - predicted) * beta[t][:, None]
        state.add_(torch.einsum("hk,hv->hkv", k[t], delta))
        out.append(torch.einsum("hkv,hk->hv", state, q[t]))
    return torch.stack(out)


class GatedDeltaNet:
    def __init__(self, weights: Weights, prefix: str, cfg: BackboneConfig, device: torch.device) -> None:
        self.nk, self.nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kernel, self.eps = cfg.linear_conv_kernel, cfg.rms_norm_eps
        kd, vd, h = self.nk * self.dk, self.nv * self.dv, cfg.hidden_size
        self.conv_channels = 2 * kd + vd
        self.in_proj_qkvz = take(weights, f"{prefix}in_proj_qkvz.weight", (2 * kd + 2 * vd, h), device)
        self.in_proj_ba = take(weights, f"{prefix}in_proj_ba.weight", (2 * self.nv, h), device)
        self.conv = take(weights, f"{prefix}conv1d.weight", (self.conv_channels, 1, self.kernel), device)
        self.dt_bias = take(weights, f"{prefix}dt_bias", (self.nv,), device)
        self.A_log = take(weights, f"{prefix}A_log", (self.nv,), device)
        self.norm = take(weights, f"{prefix}norm.weight", (self.dv,), device)
        self.out_proj = take(weights, f"{prefix}out_proj.weight", (h, vd), device)

    def new_state(self, dtype: torch.dtype, device: torch.device) -> DeltaNetState:
        return DeltaNetState.zeros(self.kernel, self.conv_channels, self.nv, self.dk, self.dv, dtype, device)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, state: DeltaNetState | None) -> torch.Tensor:
        """x (T, hidden) continuing `state` (updated in place); state None = a whole sequence from a zero state.
        `positions` is unused (the recurrence is its own clock); it keeps the mixer signature uniform."""
        T = x.shape[0]
        kd, vd = self.nk * self.dk, self.nv * self.dv
        q, k, v, z = F.linear(x, self.in_proj_qkvz).split((kd, kd, vd, vd), dim=-1)
        b, a = F.linear(x, self.in_proj_ba).split((self.nv, self.nv), dim=-1)
        mixed = torch.cat((q, k, v), dim=-1)  # (T, channels)
        if state is None:
            state = self.new_state(x.dtype, x.device)
        window = torch.cat((state.conv, mixed))  # (kernel - 1 + T, channels): causal left context
        state.conv = window[-(self.kernel - 1):].clone()
        conv = F.conv1d(window.T[None], self.conv, groups=self.conv_channels)[0].T  # (T, channels)
        q, k, v = F.silu(conv).float().split((kd, kd, vd), dim=-1)
        repeat = self.nv // self.nk  # value head h reads key head h // repeat
        q = (F.normalize(q.view(T, self.nk, self.dk), dim=-1) * self.dk ** -0.5).repeat_interleave(repeat, dim=1)
        k = F.normalize(k.view(T, self.nk, self.dk), dim=-1).repeat_interleave(repeat, dim=1)
        beta = torch.sigmoid(b.float())
        g = -torch.exp(self.A_log.float()) * F.softplus(a.float() + self.dt_bias.float())
        o = delta_rule(q, k, v.view(T, self.nv, self.dv), beta, g, state.recurrent)
        o = gated_rms_norm(o.to(x.dtype), z.view(T, self.nv, self.dv), self.norm, self.eps)
        return F.linear(o.reshape(T, vd), self.out_proj)
