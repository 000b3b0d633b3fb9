"""Per-request state: a growing key/value cache per attention layer, and the Gated DeltaNet conv + recurrent state.

The reference grows its buffers on demand (capacity doubles); static preallocation is an optimisation left to
candidates, which can swap this file as long as the verbs (`append`, `length`) keep their meaning.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class KVCache:
    """Keys and values of one attention layer for rows 0..length-1 (row index = RoPE position)."""

    def __init__(self) -> None:
        self._keys: torch.Tensor | None = None  # (capacity, kv_heads, head_dim)
        self._values: torch.Tensor | None = None
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store (T, kv_heads, head_dim) keys/values for the next T rows; return views over all stored rows."""
        end = self.length + k.shape[0]
        if self._keys is None or end > self._keys.shape[0]:
            self._grow(max(end, 2 * self.length, 64), k)
        self._keys[self.length:end] = k
        self._values[self.length:end] = v
        self.length = end
        return self._keys[:end], self._values[:end]

    def _grow(self, capacity: int, like: torch.Tensor) -> None:
        keys = like.new_empty((capacity, *like.shape[1:]))
        values = like.new_empty((capacity, *like.shape[1:]))
        if self._keys is not None:
            keys[:self.length] = self._keys[:self.length]
            values[:self.length] = self._values[:self.length]
        self._keys, self._values = keys, values


@dataclass(slots=True)
class DeltaNetState:
    """One Gated DeltaNet layer's memory: the last kernel-1 conv inputs and the fp32 delta-rule state."""

    conv: torch.Tensor  # (kernel - 1, channels) in the compute dtype, oldest row first
    recurrent: torch.Tensor  # (value_heads, key_head_dim, value_head_dim) float32

    @classmethod
    def zeros(cls, kernel: int, channels: int, value_heads: int, key_dim: int, value_dim: int,
              dtype: torch.dtype, device: torch.device) -> DeltaNetState:
        return cls(conv=torch.zeros((kernel - 1, channels), dtype=dtype, device=device),
                   recurrent=torch.zeros((value_heads, key_dim, value_dim), dtype=torch.float32, device=device))
