"""Small decode-step ops shared by the attention, DeltaNet and tower steps: the zero-centred RMSNorm with a
precomputed fp32 gain (one fused kernel where torch has one), and RoPE from a per-position cos/sin table
(a row lookup instead of recomputing the frequencies on every call; same values as layers.apply_rope).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .layers import rotate


def norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """layers.rms_norm with the gain (1 + w) already in fp32."""
    return F.rms_norm(x.float(), (x.shape[-1],), gain, eps).to(x.dtype)


class RopeTable:
    """cos / sin of position * theta^(-2i/rotary_dim) for every row a cache can hold."""

    def __init__(self, rows: int, rotary_dim: int, theta: float, device: torch.device) -> None:
        half = rotary_dim // 2
        inv_freq = theta ** (-torch.arange(0, half, device=device, dtype=torch.float32) * 2 / rotary_dim)
        angles = torch.arange(rows, device=device).to(torch.float32)[:, None] * inv_freq[None, :]
        self.rotary_dim = rotary_dim
        self.cos, self.sin = angles.cos(), angles.sin()  # (rows, half)

    def rotate(self, x: torch.Tensor, pos: torch.Tensor, interleaved: bool) -> torch.Tensor:
        """x (heads, head_dim) at row pos (1,) -> rotated like layers.apply_rope."""
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)  # (1, half): broadcast over heads
        return rotate(x, cos, sin, self.rotary_dim, interleaved)
