"""The one mapping between an HF `config.json` (model_type "fish_omni") and `Drama3Config`.

HF sections (`text_config`, Qwen3.5-MoE keys; `audio_decoder`; `quantization_config`) may carry extra keys, as real
checkpoints do; every key this runtime needs is required. `codec_config` and `serving` are swarm extensions
(the real Drama 3 loads S2-Pro's codec.pth with its own config): optional, strict, defaulting to Drama3Config's.
"""
from __future__ import annotations

import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from .config import CONFIGS, BackboneConfig, Drama3Config, TowerConfig

DTYPE_NAMES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SERVING_KEYS = ("max_context_rows", "max_prompt_rows", "max_new_frames", "max_reference_seconds", "num_speakers")


class CheckpointError(ValueError):
    """A checkpoint that does not match the contract; the message names the file and what was expected."""


def to_hf_config(config: Drama3Config, dtype: torch.dtype) -> dict[str, Any]:
    b, t = config.backbone, config.tower
    layer_types = ["full_attention" if b.is_full_attention(i) else "linear_attention" for i in range(b.num_layers)]
    return {
        "architectures": ["FishOmniModel"],
        "model_type": "fish_omni",
        "torch_dtype": {v: k for k, v in DTYPE_NAMES.items()}[dtype],
        "speech_template_version": "reference-bracket-v1",
        "semantic_start_token_id": config.semantic_begin,
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": b.hidden_size, "num_hidden_layers": b.num_layers,
            "layer_types": layer_types, "full_attention_interval": b.full_attention_interval,
            "num_attention_heads": b.num_attention_heads, "num_key_value_heads": b.num_key_value_heads,
            "head_dim": b.head_dim, "partial_rotary_factor": b.rotary_dim / b.head_dim, "rope_theta": b.rope_theta,
            "attn_output_gate": True, "linear_num_key_heads": b.linear_num_key_heads,
            "linear_num_value_heads": b.linear_num_value_heads, "linear_key_head_dim": b.linear_key_head_dim,
            "linear_value_head_dim": b.linear_value_head_dim, "linear_conv_kernel_dim": b.linear_conv_kernel,
            "num_experts": b.num_experts, "num_experts_per_tok": b.num_experts_per_tok,
            "moe_intermediate_size": b.moe_intermediate_size,
            "shared_expert_intermediate_size": b.shared_expert_intermediate_size,
            "vocab_size": config.vocab_size, "rms_norm_eps": b.rms_norm_eps, "tie_word_embeddings": False,
        },
        "audio_decoder": {
            "decoder_type": "codebook_mtp_shared", "vq_feature_placement": "mtp_shared_pre",
            "n_layer": t.num_shared_layers, "shared_enrichment_layers": t.num_shared_layers,
            "num_codebooks": config.num_codebooks, "codebook_size": config.codebook_size, "dim": b.hidden_size,
            "n_head": t.num_attention_heads, "n_local_heads": t.num_key_value_heads, "head_dim": t.head_dim,
            "rotary_percent": t.rotary_dim / t.head_dim, "rope_base": t.rope_theta,
            "intermediate_size": t.intermediate_size, "head_size": t.head_size, "norm_eps": t.rms_norm_eps,
        },
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [b.fp8_block, b.fp8_block]},
        "codec_config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config.codec).items()},
        "serving": {key: getattr(config, key) for key in SERVING_KEYS},
    }


class _Section:
    """Typed reads from one config.json section; every error names the file and the key path."""

    def __init__(self, raw: Any, where: str, source: Path) -> None:
        if not isinstance(raw, dict):
            raise CheckpointError(f"{source}: {where} must be a JSON object, got {type(raw).__name__}")
        self.raw, self.where, self.source = raw, where, source

    def fail(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.source}: {self.where}: {message}")

    def get(self, key: str, kind: type, default: Any = None) -> Any:
        if key not in self.raw:
            if default is None:
                raise self.fail(f"missing required key {key!r}")
            return default
        value = self.raw[key]
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.fail(f"{key!r} must be {kind.__name__}, got {value!r}")
        return value

    def expect(self, key: str, allowed: tuple[Any, ...], required: bool = True) -> None:
        if key not in self.raw and not required:
            return
        if self.raw.get(key) not in allowed:
            raise self.fail(f"{key!r} must be one of {list(allowed)} for this runtime, got {self.raw.get(key)!r}")

    def rotary_dim(self, key: str, head_dim: int) -> int:
        dims = self.get(key, float) * head_dim
        if dims != int(dims) or int(dims) % 2:
            raise self.fail(f"{key!r} x head_dim {head_dim} = {dims} must be an even whole number of rotary dims")
        return int(dims)


def _full_attention_interval(text: _Section, num_layers: int) -> int:
    interval = text.get("full_attention_interval", int, 0)
    if "layer_types" in text.raw:
        types = text.get("layer_types", list)
        if len(types) != num_layers or "full_attention" not in types:
            raise text.fail(f"layer_types must list {num_layers} layers with at least one 'full_attention'")
        interval = interval or types.index("full_attention") + 1
        periodic = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]
        if types != periodic:
            raise text.fail(f"layer_types must be 'full_attention' where (i + 1) % {interval} == 0 and "
                            f"'linear_attention' elsewhere (full_attention_interval {interval}), got {types}")
    if not interval:
        raise text.fail("needs 'full_attention_interval' or 'layer_types'")
    return interval


def _optional_fields(section: _Section, defaults: dict[str, Any]) -> dict[str, Any]:
    """A strict swarm-extension section: only known keys, each typed like its default (tuples as JSON lists)."""
    unknown = sorted(set(section.raw) - set(defaults))
    if unknown:
        raise section.fail(f"unknown keys {unknown}; allowed: {sorted(defaults)}")
    values = {}
    for key in section.raw:
        kind = list if isinstance(defaults[key], tuple) else type(defaults[key])
        values[key] = tuple(section.get(key, kind)) if kind is list else section.get(key, kind)
    return values


def _backbone(text: _Section, block: int) -> BackboneConfig:
    rope = _Section(text.raw.get("rope_parameters", {}), "text_config.rope_parameters", text.source)
    num_layers, head_dim = text.get("num_hidden_layers", int), text.get("head_dim", int)
    return _build(text, BackboneConfig, dict(
        num_layers=num_layers, hidden_size=text.get("hidden_size", int),
        full_attention_interval=_full_attention_interval(text, num_layers),
        num_attention_heads=text.get("num_attention_heads", int),
        num_key_value_heads=text.get("num_key_value_heads", int), head_dim=head_dim,
        # newer HF configs nest the rope keys under rope_parameters
        rotary_dim=(rope if "partial_rotary_factor" in rope.raw else text).rotary_dim("partial_rotary_factor",
                                                                                      head_dim),
        rope_theta=(rope if "rope_theta" in rope.raw else text).get("rope_theta", float),
        linear_num_key_heads=text.get("linear_num_key_heads", int),
        linear_num_value_heads=text.get("linear_num_value_heads", int),
        linear_key_head_dim=text.get("linear_key_head_dim", int),
        linear_value_head_dim=text.get("linear_value_head_dim", int),
        linear_conv_kernel=text.get("linear_conv_kernel_dim", int), num_experts=text.get("num_experts", int),
        num_experts_per_tok=text.get("num_experts_per_tok", int),
        moe_intermediate_size=text.get("moe_intermediate_size", int),
        shared_expert_intermediate_size=text.get("shared_expert_intermediate_size", int),
        fp8_block=block, rms_norm_eps=text.get("rms_norm_eps", float),
    ))


def _tower(tower: _Section, backbone: BackboneConfig) -> TowerConfig:
    geometry = (tower.get("n_head", int), tower.get("n_local_heads", int), tower.get("head_dim", int),
                tower.get("dim", int))
    expected = (backbone.num_attention_heads, backbone.num_key_value_heads, backbone.head_dim, backbone.hidden_size)
    if geometry != expected:
        raise tower.fail(f"(n_head, n_local_heads, head_dim, dim) = {geometry} must equal text_config's "
                         f"(num_attention_heads, num_key_value_heads, head_dim, hidden_size) = {expected}: "
                         f"the tower shares the backbone's attention geometry")
    shared = tower.get("shared_enrichment_layers", int)
    if tower.get("n_layer", int) != shared:
        raise tower.fail(f"n_layer ({tower.raw['n_layer']}) must equal shared_enrichment_layers ({shared})")
    return _build(tower, TowerConfig, dict(
        num_shared_layers=shared, num_attention_heads=geometry[0], num_key_value_heads=geometry[1],
        head_dim=geometry[2], rotary_dim=tower.rotary_dim("rotary_percent", geometry[2]),
        rope_theta=tower.get("rope_base", float), intermediate_size=tower.get("intermediate_size", int),
        head_size=tower.get("head_size", int), rms_norm_eps=tower.get("norm_eps", float),
    ))


def _build(section: _Section, cls: type, values: dict[str, Any]) -> Any:
    """Construct a config dataclass, turning a failed invariant into an error that quotes it."""
    try:
        return cls(**values)
    except AssertionError as exc:
        invariant = traceback.extract_tb(exc.__traceback__)[-1].line
        raise section.fail(f"inconsistent geometry, {cls.__name__} requires `{invariant}` ({exc})") from exc


def from_hf_config(raw: Any, source: Path) -> tuple[Drama3Config, torch.dtype]:
    """config.json contents (read from `source`) -> (Drama3Config, stored compute dtype).

    A geometry equal to a preset's gets the preset's name; any other is named after the checkpoint directory.
    """
    top = _Section(raw, "config", source)
    top.expect("model_type", ("fish_omni",))
    dtype_name = top.get("torch_dtype", str, top.raw.get("dtype"))
    if not isinstance(dtype_name, str) or dtype_name not in DTYPE_NAMES:
        raise top.fail(f"torch_dtype must be one of {sorted(DTYPE_NAMES)}, got {dtype_name!r}")
    quant = _Section(top.get("quantization_config", dict), "quantization_config", source)
    quant.expect("quant_method", ("fp8",))
    quant.expect("fmt", ("e4m3",))
    block = quant.get("weight_block_size", list)
    if len(block) != 2 or block[0] != block[1] or not isinstance(block[0], int):
        raise quant.fail(f"weight_block_size must be a square [B, B] of ints, got {block}")
    text = _Section(top.get("text_config", dict), "text_config", source)
    text.expect("attn_output_gate", (True,), required=False)
    text.expect("tie_word_embeddings", (False,), required=False)
    tower = _Section(top.get("audio_decoder", dict), "audio_decoder", source)
    tower.expect("decoder_type", ("codebook_mtp_shared",))
    tower.expect("vq_feature_placement", ("mtp_shared_pre",))
    backbone = _backbone(text, block[0])

    codebook_size, vocab = tower.get("codebook_size", int), text.get("vocab_size", int)
    semantic_begin = top.get("semantic_start_token_id", int)
    if semantic_begin + codebook_size != vocab:
        raise text.fail(f"vocab_size {vocab} must equal semantic_start_token_id {semantic_begin} + "
                        f"audio_decoder.codebook_size {codebook_size} (the semantic band closes the vocabulary)")
    defaults = Drama3Config()
    codec = _Section(top.raw.get("codec_config", {}), "codec_config", source)
    serving = _Section(top.raw.get("serving", {}), "serving", source)
    config = _build(top, Drama3Config, dict(
        name=source.parent.name, backbone=backbone, tower=_tower(tower, backbone),
        codec=replace(defaults.codec, **_optional_fields(codec, asdict(defaults.codec))),
        num_codebooks=tower.get("num_codebooks", int), codebook_size=codebook_size, text_vocab_size=semantic_begin,
        **_optional_fields(serving, {key: getattr(defaults, key) for key in SERVING_KEYS}),
    ))
    for preset_name, preset in CONFIGS.items():
        if replace(config, name=preset_name) == preset():
            return replace(config, name=preset_name), DTYPE_NAMES[dtype_name]
    return config, DTYPE_NAMES[dtype_name]
