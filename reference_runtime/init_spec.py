"""How each weight tensor is described (shape, dtype kind, init rule) and drawn from its own seeded generator.

Shared by the backbone/tower table (`weights.py`) and the codec table (`codec_weights.py`).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Literal

import torch

from .fp8 import FP8_DTYPE


@dataclass(frozen=True, slots=True)
class Init:
    """How a tensor is drawn: `mean + std * N(0, 1)`, or a Gated DeltaNet rule (A_log, dt_bias)."""

    std: float = 0.0
    mean: float = 0.0
    rule: Literal["normal", "a_log", "dt_bias"] = "normal"


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """One tensor of the contract. kind: "compute" (bf16/fp32 compute dtype), "fp8" (block-FP8 routed-expert
    weight, its scale follows as `name + SCALE_SUFFIX`) or "scale" (fp32 scale_inv, drawn with its fp8 weight)."""

    shape: tuple[int, ...]
    kind: Literal["compute", "fp8", "scale"]
    init: Init | None = None  # None only for "scale"

    def dtype(self, compute_dtype: torch.dtype) -> torch.dtype:
        return {"compute": compute_dtype, "fp8": FP8_DTYPE, "scale": torch.float32}[self.kind]


def _tensor_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") >> 1


def draw(name: str, spec: WeightSpec, seed: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """One tensor from its own generator seeded by (seed, name), so values never depend on init order."""
    gen = torch.Generator(device=device)
    gen.manual_seed(_tensor_seed(seed, name))
    init = spec.init
    if init.rule == "normal":
        return torch.randn(spec.shape, generator=gen, device=device, dtype=dtype).mul_(init.std).add_(init.mean)
    u = torch.rand(spec.shape, generator=gen, device=device, dtype=torch.float32)
    if init.rule == "a_log":  # A ~ U(1, 16), per value head
        return torch.log(1 + 15 * u).to(dtype)
    # dt_bias: inverse softplus of dt ~ logU(1e-3, 1e-1), the Mamba2 / Gated DeltaNet time-step init
    dt = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
    return (dt + torch.log(-torch.expm1(-dt))).to(dtype)
