"""Gated full attention (backbone every 4th layer, and every tower layer).

q_proj emits, per head, hd query dims then hd gate dims; q/k get a per-head zero-centred RMSNorm and partial
RoPE on the first rotary_dim dims; causal GQA attention over the layer's KV cache; the output is multiplied
by sigmoid(gate) before o_proj.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights

from .kv_cache import KVCache
from .layers import apply_rope, rms_norm, take


@dataclass(frozen=True, slots=True)
class AttentionGeometry:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float
    interleaved_rope: bool  # tower: interleaved pairs; backbone: rotate-half
    eps: float


class GatedAttention:
    def __init__(self, weights: Weights, prefix: str, hidden: int, geo: AttentionGeometry,
                 device: torch.device) -> None:
        nh, nkv, hd = geo.num_heads, geo.num_kv_heads, geo.head_dim
        self.geo = geo
        self.q_proj = take(weights, f"{prefix}q_proj.weight", (nh * hd * 2, hidden), device)
        self.k_proj = take(weights, f"{prefix}k_proj.weight", (nkv * hd, hidden), device)
        self.v_proj = take(weights, f"{prefix}v_proj.weight", (nkv * hd, hidden), device)
        self.o_proj = take(weights, f"{prefix}o_proj.weight", (hidden, nh * hd), device)
        self.q_norm = take(weights, f"{prefix}q_norm.weight", (hd,), device)
        self.k_norm = take(weights, f"{prefix}k_norm.weight", (hd,), device)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """x (T, hidden) at `positions` (T,). With a cache, attends over every cached row up to each position;
        without one, x must be the whole sequence from position 0 (plain causal attention)."""
        g = self.geo
        T = x.shape[0]
        qg = F.linear(x, self.q_proj).view(T, g.num_heads, 2, g.head_dim)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = F.linear(x, self.k_proj).view(T, g.num_kv_heads, g.head_dim)
        v = F.linear(x, self.v_proj).view(T, g.num_kv_heads, g.head_dim)
        q = apply_rope(rms_norm(q, self.q_norm, g.eps), positions, g.rotary_dim, g.rope_theta, g.interleaved_rope)
        k = apply_rope(rms_norm(k, self.k_norm, g.eps), positions, g.rotary_dim, g.rope_theta, g.interleaved_rope)
        if cache is None:
            keys, values, mask = k, v, None
        else:
            keys, values = cache.append(k, v)
            mask = torch.arange(keys.shape[0], device=x.device)[None, :] <= positions[:, None]  # (T, rows)
        group = g.num_heads // g.num_kv_heads  # query head h reads kv head h // group
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.repeat_interleave(group, dim=1).transpose(0, 1),
            values.repeat_interleave(group, dim=1).transpose(0, 1), attn_mask=mask, is_causal=mask is None,
        ).transpose(0, 1)  # (T, heads, head_dim)
        out = attn * torch.sigmoid(gate)
        return F.linear(out.reshape(T, g.num_heads * g.head_dim), self.o_proj)
