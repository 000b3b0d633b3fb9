"""The key a kept engine is filed under: architecture features, model config, hardware and software stack."""
from __future__ import annotations

from importlib import metadata

import torch

from knowledge_base import EngineKey
from reference_runtime.config import Drama3Config, get_config
from targets import Target


def architecture_features(config: Drama3Config) -> list[str]:
    """Structural features an optimisation can depend on, sorted (e.g. a fused FP8 MoE kernel needs fp8_moe)."""
    b = config.backbone
    features = {"dac_codec"}
    if b.num_experts > 1 and b.fp8_block:
        features.add("fp8_moe")
    layers = range(b.num_layers)
    if any(not b.is_full_attention(i) for i in layers):
        features.add("gated_deltanet")
    if any(b.is_full_attention(i) for i in layers):
        features.add("gated_attention")
    if config.num_codebooks > 1:
        features.add("codebook_mtp")
    return sorted(features)


def _triton_version() -> str:
    try:
        return metadata.version("triton")  # no import: triton may not load on CPU-only machines
    except metadata.PackageNotFoundError:
        return ""


def engine_key(target: Target) -> EngineKey:
    """The key for engines measured on this machine's stack for `target`."""
    return EngineKey(
        architecture=",".join(architecture_features(get_config(target.model.config))),
        model_config=target.model.config,
        device=target.hardware.device,
        gpu=target.hardware.gpu or "",
        torch_version=torch.__version__,
        triton_version=_triton_version(),
        cuda_version=torch.version.cuda or "",
    )
