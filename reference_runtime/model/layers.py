"""Stateless building blocks shared by the backbone and the tower: norms, SwiGLU, rotary embeddings.

Every norm computes in fp32 and casts back to the input dtype. RMSNorms are zero-centred (gain = 1 + w) except
the Gated DeltaNet output norm, which uses a plain gamma.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights


def take(weights: Weights, name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The weight `name`, checked against the expected shape and moved to `device` (no copy if already there)."""
    if name not in weights:
        raise KeyError(f"weight {name!r} is missing; see docs/weights.md for the names the engine expects")
    w = weights[name]
    if tuple(w.shape) != shape:
        raise ValueError(f"weight {name!r} has shape {tuple(w.shape)}, expected {shape} for this config")
    return w.to(device)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    return y.to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated DeltaNet output norm: RMSNorm with a plain gamma, times silu(gate)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return (y * F.silu(gate.float())).to(x.dtype)


def swiglu(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, gate_w)) * F.linear(x, up_w), down_w)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, rotary_dim: int, theta: float,
               interleaved: bool) -> torch.Tensor:
    """Rotate the first `rotary_dim` dims of x (T, heads, head_dim) by angle position * theta^(-2i/rotary_dim).

    Non-interleaved (backbone) pairs dim i with i + rotary_dim/2 ("rotate half"); interleaved (tower) pairs
    dims 2i and 2i+1. The remaining head dims pass through unrotated (partial RoPE).
    """
    half = rotary_dim // 2
    inv_freq = theta ** (-torch.arange(0, half, device=x.device, dtype=torch.float32) * 2 / rotary_dim)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, half)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]  # broadcast over heads
    return rotate(x, cos, sin, rotary_dim, interleaved)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, interleaved: bool) -> torch.Tensor:
    """The rotation of apply_rope with cos/sin (broadcastable to (..., rotary_dim/2), fp32) already in hand."""
    half = rotary_dim // 2
    rot, rest = x[..., :rotary_dim].float(), x[..., rotary_dim:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    else:
        a, b = rot[..., :half], rot[..., half:]
        rotated = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    return torch.cat((rotated.to(x.dtype), rest), dim=-1)
