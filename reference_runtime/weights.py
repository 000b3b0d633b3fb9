"""Seeded random init of the HF-layout weight dict of docs/weights.md (backbone, codebook-MTP tower, codec).

`weight_shapes(config)` is the name/shape/dtype table (testable without allocating); `init_weights` draws each
tensor from its own generator seeded by (seed, name), so values never depend on init order, and quantises the
routed experts to block FP8 as it goes (peak extra memory: one layer's expert stack in the compute dtype).
"""
from __future__ import annotations

import hashlib
import math

import torch

from .api import Weights
from .codec_weights import init_codec_weights
from .config import Drama3Config
from .fp8 import quantize_blocks
from .init_spec import Init, WeightSpec, draw

SCALE_SUFFIX = "_scale_inv"
NORM_NOISE_STD = 0.1  # zero-centred norm gains ~0 (y = x_hat * (1 + w)), noisy so a swapped norm is visible
EMBED_STD = 1.0


def _linear(out_dim: int, in_dim: int, out_scale: float = 1.0) -> WeightSpec:
    # std 1/sqrt(fan_in) keeps unit-RMS inputs at unit RMS; residual-branch outputs are further damped by
    # out_scale = 1/sqrt(2 * depth) so the residual stream grows slowly over the stack.
    return WeightSpec((out_dim, in_dim), "compute", Init(std=out_scale / math.sqrt(in_dim)))


def _norm(dim: int, mean: float = 0.0) -> WeightSpec:
    return WeightSpec((dim,), "compute", Init(std=NORM_NOISE_STD, mean=mean))


def _fp8_stack(prefix: str, shape: tuple[int, int, int], block: int, std: float) -> dict[str, WeightSpec]:
    experts, rows, cols = shape
    return {prefix: WeightSpec(shape, "fp8", Init(std=std)),
            prefix + SCALE_SUFFIX: WeightSpec((experts, rows // block, cols // block), "scale")}


def _attention(prefix: str, hidden: int, heads: int, kv_heads: int, head_dim: int,
               out_scale: float) -> dict[str, WeightSpec]:
    return {
        f"{prefix}q_proj.weight": _linear(heads * head_dim * 2, hidden),  # per head: query dims, then gate dims
        f"{prefix}k_proj.weight": _linear(kv_heads * head_dim, hidden),
        f"{prefix}v_proj.weight": _linear(kv_heads * head_dim, hidden),
        f"{prefix}o_proj.weight": _linear(hidden, heads * head_dim, out_scale),
        f"{prefix}q_norm.weight": _norm(head_dim),
        f"{prefix}k_norm.weight": _norm(head_dim),
    }


def _gated_deltanet(prefix: str, config: Drama3Config, out_scale: float) -> dict[str, WeightSpec]:
    b = config.backbone
    kd = b.linear_num_key_heads * b.linear_key_head_dim
    vd = b.linear_num_value_heads * b.linear_value_head_dim
    nv, kernel = b.linear_num_value_heads, b.linear_conv_kernel
    return {
        f"{prefix}in_proj_qkvz.weight": _linear(2 * kd + 2 * vd, b.hidden_size),
        f"{prefix}in_proj_ba.weight": _linear(2 * nv, b.hidden_size),
        f"{prefix}conv1d.weight": WeightSpec((2 * kd + vd, 1, kernel), "compute", Init(std=1 / math.sqrt(kernel))),
        f"{prefix}dt_bias": WeightSpec((nv,), "compute", Init(rule="dt_bias")),
        f"{prefix}A_log": WeightSpec((nv,), "compute", Init(rule="a_log")),
        f"{prefix}norm.weight": _norm(b.linear_value_head_dim, mean=1.0),  # plain-gamma gated RMSNorm
        f"{prefix}out_proj.weight": _linear(b.hidden_size, vd, out_scale),
    }


def _moe(prefix: str, config: Drama3Config, out_scale: float) -> dict[str, WeightSpec]:
    b = config.backbone
    h, inter, shared = b.hidden_size, b.moe_intermediate_size, b.shared_expert_intermediate_size
    return {
        f"{prefix}gate.weight": _linear(b.num_experts, h),  # router logits ~N(0, 1): top-k varies by token
        **_fp8_stack(f"{prefix}experts.gate_up_proj", (b.num_experts, 2 * inter, h), b.fp8_block, 1 / math.sqrt(h)),
        **_fp8_stack(f"{prefix}experts.down_proj", (b.num_experts, h, inter), b.fp8_block,
                     out_scale / math.sqrt(inter)),
        f"{prefix}shared_expert.gate_proj.weight": _linear(shared, h),
        f"{prefix}shared_expert.up_proj.weight": _linear(shared, h),
        f"{prefix}shared_expert.down_proj.weight": _linear(h, shared, out_scale),
        f"{prefix}shared_expert_gate.weight": _linear(1, h),
    }


def _backbone(config: Drama3Config) -> dict[str, WeightSpec]:
    b = config.backbone
    h, out_scale = b.hidden_size, 1 / math.sqrt(2 * b.num_layers)
    specs = {"model.embed_tokens.weight": WeightSpec((config.vocab_size, h), "compute", Init(std=EMBED_STD))}
    for i in range(b.num_layers):
        p = f"model.layers.{i}."
        specs[f"{p}input_layernorm.weight"] = _norm(h)
        if b.is_full_attention(i):
            specs |= _attention(f"{p}self_attn.", h, b.num_attention_heads, b.num_key_value_heads, b.head_dim,
                                out_scale)
        else:
            specs |= _gated_deltanet(f"{p}linear_attn.", config, out_scale)
        specs[f"{p}post_attention_layernorm.weight"] = _norm(h)
        specs |= _moe(f"{p}mlp.", config, out_scale)
    specs["model.norm.weight"] = _norm(h)
    specs["lm_head.weight"] = _linear(config.vocab_size, h)
    return specs


def _tower(config: Drama3Config) -> dict[str, WeightSpec]:
    t, h = config.tower, config.hidden_size
    out_scale = 1 / math.sqrt(2 * config.num_tower_layers)
    embed = Init(std=EMBED_STD)
    specs = {"audio_decoder.codebook_embeddings.weight":
             WeightSpec((config.num_codebooks * config.codebook_size, h), "compute", embed)}
    for j in range(config.num_tower_layers):
        p = f"audio_decoder.layers.{j}."
        specs |= {
            f"{p}code_embedding.weight": WeightSpec((config.codebook_size, h), "compute", embed),
            f"{p}enorm.weight": _norm(h),
            f"{p}hnorm.weight": _norm(h),
            f"{p}eh_proj.weight": _linear(h, 2 * h),
            f"{p}input_layernorm.weight": _norm(h),
            **_attention(f"{p}self_attn.", h, t.num_attention_heads, t.num_key_value_heads, t.head_dim, out_scale),
            f"{p}post_attention_layernorm.weight": _norm(h),
            f"{p}mlp.gate_proj.weight": _linear(t.intermediate_size, h),
            f"{p}mlp.up_proj.weight": _linear(t.intermediate_size, h),
            f"{p}mlp.down_proj.weight": _linear(h, t.intermediate_size, out_scale),
            f"{p}final_norm.weight": _norm(h),
        }
    for k in range(config.num_codebooks - 1):
        specs[f"audio_decoder.heads.{k}.weight"] = _linear(t.head_size, h)
    return specs


def weight_shapes(config: Drama3Config) -> dict[str, WeightSpec]:
    """Every backbone and tower tensor of docs/weights.md, in layer order (codec names: `codec_weights.py`)."""
    return _backbone(config) | _tower(config)


def default_dtype(config: Drama3Config) -> torch.dtype:
    """bf16 for the full model; float32 for drama3-tiny so CPU tests are exact."""
    return torch.float32 if config.name == "drama3-tiny" else torch.bfloat16


def codec_dtype(device: torch.device, compute_dtype: torch.dtype) -> torch.dtype:
    """Codec weights are float32 on CPU and the compute dtype on GPU (docs/weights.md)."""
    return torch.float32 if device.type == "cpu" else compute_dtype


def init_weights(config: Drama3Config, seed: int, device: torch.device | str,
                 dtype: torch.dtype | None = None) -> Weights:
    """Deterministic for (config, seed, device): the full weight dict, experts already block-FP8."""
    device = torch.device(device)
    dtype = dtype or default_dtype(config)
    weights: Weights = {}
    for name, spec in weight_shapes(config).items():
        if spec.kind == "scale":
            continue  # produced with its fp8 weight
        w = draw(name, spec, seed, device, dtype)
        if spec.kind == "fp8":
            weights[name], weights[name + SCALE_SUFFIX] = quantize_blocks(w, config.backbone.fp8_block)
            del w  # drop the unquantised stack before the next layer's is drawn
        else:
            weights[name] = w
    weights |= init_codec_weights(config.codec, seed, device, codec_dtype(device, dtype))
    return weights


def narrow_lm_head(config: Drama3Config, lm_head_weight: torch.Tensor) -> torch.Tensor:
    """(V, H) lm_head -> (1 + codebook_size, H): row 0 = EOS, then the semantic band, matching FrameStep.main_logits."""
    expected = (config.vocab_size, config.hidden_size)
    if tuple(lm_head_weight.shape) != expected:
        raise ValueError(f"narrow_lm_head: lm_head.weight must be {expected} (vocab, hidden) for "
                         f"{config.name}, got {tuple(lm_head_weight.shape)}")
    eos, begin = config.eos_token_id, config.semantic_begin
    return torch.cat([lm_head_weight[eos:eos + 1], lm_head_weight[begin:begin + config.codebook_size]])


def weights_fingerprint(weights: Weights, samples_per_tensor: int = 64) -> str:
    """Stable hash over names, shapes, dtypes and a strided sample of each tensor's values (any device)."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name]
        digest.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        flat = t.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // samples_per_tensor)][:samples_per_tensor]
        digest.update(sample.contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()[:16]
