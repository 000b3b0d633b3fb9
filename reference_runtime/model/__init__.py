"""The reference Drama 3 engine: an eager, readable PyTorch implementation and the correctness oracle.

This directory is the forkable engine package: a candidate is a copy of it. Modules import the shared
`reference_runtime.{api,config,fp8,...}` absolutely and each other relatively.
"""
from __future__ import annotations

import torch

from reference_runtime.api import Weights
from reference_runtime.config import Drama3Config
from reference_runtime.weights import codec_dtype

from .codec import Codec
from .drama3 import Drama3Model
from .engine import ReferenceEngine


def build_engine(config: Drama3Config, weights: Weights, device: torch.device | str,
                 codec_device: torch.device | str | None = None) -> ReferenceEngine:
    device = torch.device(device)
    codec_device = device if codec_device is None else torch.device(codec_device)
    model = Drama3Model(weights, config, device)
    codec = Codec.from_weights(config.codec, weights, codec_device, codec_dtype(codec_device, model.backbone.dtype))
    return ReferenceEngine(config, model, codec, device)


__all__ = ["build_engine", "Drama3Model", "ReferenceEngine"]
