"""Weights of the per-frame decode step, taken from the HF weight dict: views (no copies), except that with
`fuse` the matrices one token multiplies together become one GEMV (attention q|k|v; DeltaNet qkvz|ba; router +
shared expert gate|up + its sigmoid gate; tower gate|up), and small precomputed fp32 terms (norm gains 1 + w,
DeltaNet decay rates). Building them never modifies the dict.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights
from reference_runtime.config import Drama3Config
from reference_runtime.weights import narrow_lm_head

from .layers import take


class Projection:
    """Matrices applied to the same input, their outputs concatenated; a single GEMV once fused."""

    def __init__(self, mats: Sequence[torch.Tensor], fuse: bool) -> None:
        self.mats = [torch.cat(list(mats))] if fuse and len(mats) > 1 else list(mats)
        self.sizes = [m.shape[0] for m in mats]

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x (T, in) -> one (T, rows_i) output per original matrix."""
        out = F.linear(x, self.mats[0]) if len(self.mats) == 1 else torch.cat([F.linear(x, m) for m in self.mats], -1)
        return list(out.split(self.sizes, dim=-1))


def gain(weights: Weights, name: str, dim: int, device: torch.device) -> torch.Tensor:
    """Zero-centred RMSNorm gain 1 + w in fp32, as the reference's rms_norm computes it on every call."""
    return 1.0 + take(weights, name, (dim,), device).float()


@dataclass(slots=True)
class AttnWeights:
    qkv: Projection  # -> query+gate (nh*hd*2), key (nkv*hd), value (nkv*hd)
    o_proj: torch.Tensor
    q_gain: torch.Tensor
    k_gain: torch.Tensor


def attention(weights: Weights, prefix: str, hidden: int, heads: int, kv_heads: int, head_dim: int,
              device: torch.device, fuse: bool) -> AttnWeights:
    mats = [take(weights, f"{prefix}q_proj.weight", (heads * head_dim * 2, hidden), device),
            take(weights, f"{prefix}k_proj.weight", (kv_heads * head_dim, hidden), device),
            take(weights, f"{prefix}v_proj.weight", (kv_heads * head_dim, hidden), device)]
    return AttnWeights(Projection(mats, fuse), take(weights, f"{prefix}o_proj.weight", (hidden, heads * head_dim), device),
                       gain(weights, f"{prefix}q_norm.weight", head_dim, device),
                       gain(weights, f"{prefix}k_norm.weight", head_dim, device))


@dataclass(slots=True)
class DeltaNetWeights:
    proj: Projection  # -> q|k|v|z, b|a (fused: one GEMV)
    conv: torch.Tensor  # (kernel, channels): conv1d weight transposed for a one-row window product
    dt_bias: torch.Tensor  # fp32
    neg_a: torch.Tensor  # fp32 -exp(A_log)
    norm: torch.Tensor
    out_proj: torch.Tensor


@dataclass(slots=True)
class MoEWeights:
    proj: Projection  # -> router logits (E), shared gate (Is), shared up (Is), shared expert gate (1)
    gate_up: torch.Tensor  # (E, 2I, H) uint8 view of the fp8 stack: indexable by device expert ids everywhere
    gate_up_scale: torch.Tensor
    down: torch.Tensor  # (E, H, I) uint8 view
    down_scale: torch.Tensor
    shared_down: torch.Tensor


@dataclass(slots=True)
class LayerWeights:
    input_gain: torch.Tensor
    post_gain: torch.Tensor
    mixer: AttnWeights | DeltaNetWeights
    moe: MoEWeights


@dataclass(slots=True)
class TowerLayerWeights:
    code_embedding: torch.Tensor
    enorm: torch.Tensor
    hnorm: torch.Tensor
    eh_proj: torch.Tensor
    input_gain: torch.Tensor
    attn: AttnWeights
    post_gain: torch.Tensor
    gate_up: Projection
    down: torch.Tensor
    final_gain: torch.Tensor


@dataclass(slots=True)
class DecodeWeights:
    embed: torch.Tensor
    layers: list[LayerWeights]
    norm_gain: torch.Tensor
    lm_head: torch.Tensor  # narrowed to [EOS, semantic band]
    tower: list[TowerLayerWeights]
    heads: list[torch.Tensor]


def _deltanet(weights: Weights, p: str, config: Drama3Config, device: torch.device, fuse: bool) -> DeltaNetWeights:
    b, h = config.backbone, config.hidden_size
    kd, vd, nv = b.linear_num_key_heads * b.linear_key_head_dim, b.linear_num_value_heads * b.linear_value_head_dim, \
        b.linear_num_value_heads
    channels = 2 * kd + vd
    proj = Projection([take(weights, f"{p}in_proj_qkvz.weight", (2 * kd + 2 * vd, h), device),
                       take(weights, f"{p}in_proj_ba.weight", (2 * nv, h), device)], fuse)
    conv = take(weights, f"{p}conv1d.weight", (channels, 1, b.linear_conv_kernel), device)[:, 0].T.contiguous()
    return DeltaNetWeights(proj, conv, take(weights, f"{p}dt_bias", (nv,), device).float(),
                           -torch.exp(take(weights, f"{p}A_log", (nv,), device).float()),
                           take(weights, f"{p}norm.weight", (b.linear_value_head_dim,), device),
                           take(weights, f"{p}out_proj.weight", (h, vd), device))


def _moe(weights: Weights, p: str, config: Drama3Config, device: torch.device, fuse: bool) -> MoEWeights:
    b, h = config.backbone, config.hidden_size
    E, inter, block, shared = b.num_experts, b.moe_intermediate_size, b.fp8_block, b.shared_expert_intermediate_size
    proj = Projection([take(weights, f"{p}gate.weight", (E, h), device),
                       take(weights, f"{p}shared_expert.gate_proj.weight", (shared, h), device),
                       take(weights, f"{p}shared_expert.up_proj.weight", (shared, h), device),
                       take(weights, f"{p}shared_expert_gate.weight", (1, h), device)], fuse)
    return MoEWeights(
        proj, take(weights, f"{p}experts.gate_up_proj", (E, 2 * inter, h), device).view(torch.uint8),
        take(weights, f"{p}experts.gate_up_proj_scale_inv", (E, 2 * inter // block, h // block), device),
        take(weights, f"{p}experts.down_proj", (E, h, inter), device).view(torch.uint8),
        take(weights, f"{p}experts.down_proj_scale_inv", (E, h // block, inter // block), device),
        take(weights, f"{p}shared_expert.down_proj.weight", (h, shared), device))


def _layer(weights: Weights, i: int, config: Drama3Config, device: torch.device, fuse: bool) -> LayerWeights:
    b, h, p = config.backbone, config.hidden_size, f"model.layers.{i}."
    if b.is_full_attention(i):
        mixer: AttnWeights | DeltaNetWeights = attention(
            weights, f"{p}self_attn.", h, b.num_attention_heads, b.num_key_value_heads, b.head_dim, device, fuse)
    else:
        mixer = _deltanet(weights, f"{p}linear_attn.", config, device, fuse)
    return LayerWeights(gain(weights, f"{p}input_layernorm.weight", h, device),
                        gain(weights, f"{p}post_attention_layernorm.weight", h, device),
                        mixer, _moe(weights, f"{p}mlp.", config, device, fuse))


def _tower_layer(weights: Weights, j: int, config: Drama3Config, device: torch.device,
                 fuse: bool) -> TowerLayerWeights:
    t, h, p = config.tower, config.hidden_size, f"audio_decoder.layers.{j}."
    return TowerLayerWeights(
        take(weights, f"{p}code_embedding.weight", (config.codebook_size, h), device),
        gain(weights, f"{p}enorm.weight", h, device), gain(weights, f"{p}hnorm.weight", h, device),
        take(weights, f"{p}eh_proj.weight", (h, 2 * h), device), gain(weights, f"{p}input_layernorm.weight", h, device),
        attention(weights, f"{p}self_attn.", h, t.num_attention_heads, t.num_key_value_heads, t.head_dim, device, fuse),
        gain(weights, f"{p}post_attention_layernorm.weight", h, device),
        Projection([take(weights, f"{p}mlp.gate_proj.weight", (t.intermediate_size, h), device),
                    take(weights, f"{p}mlp.up_proj.weight", (t.intermediate_size, h), device)], fuse),
        take(weights, f"{p}mlp.down_proj.weight", (h, t.intermediate_size), device),
        gain(weights, f"{p}final_norm.weight", h, device))


def decode_weights(weights: Weights, config: Drama3Config, device: torch.device, fuse: bool) -> DecodeWeights:
    h = config.hidden_size
    return DecodeWeights(
        embed=take(weights, "model.embed_tokens.weight", (config.vocab_size, h), device),
        layers=[_layer(weights, i, config, device, fuse) for i in range(config.backbone.num_layers)],
        norm_gain=gain(weights, "model.norm.weight", h, device),
        lm_head=narrow_lm_head(config, take(weights, "lm_head.weight", (config.vocab_size, h), device)),
        tower=[_tower_layer(weights, j, config, device, fuse) for j in range(config.num_tower_layers)],
        heads=[take(weights, f"audio_decoder.heads.{k}.weight", (config.tower.head_size, h), device)
               for k in range(config.num_codebooks - 1)],
    )
