"""Fixed-address request state, so one captured CUDA graph can replay every frame: KV caches preallocated to
max_context_rows, the Gated DeltaNet conv + recurrent states, and the per-frame buffers (position counter, seed,
the row being appended, RAS window, forced frame, logits outputs, and every predicted frame by position).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_runtime.api import ROW_WIDTH
from reference_runtime.config import Drama3Config

from .kv_cache import DeltaNetState


class StaticKVCache:
    """KVCache's verbs (`append`, `length`) over buffers allocated once; decode steps write row `pos` directly."""

    def __init__(self, rows: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        self.keys = torch.zeros((rows, kv_heads, head_dim), dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[0]
        if end > self.keys.shape[0]:
            raise ValueError(f"KV cache holds {self.keys.shape[0]} rows (config.max_context_rows); {end} requested")
        self.keys[self.length:end] = k
        self.values[self.length:end] = v
        self.length = end
        return self.keys[:end], self.values[:end]


@dataclass(slots=True)
class FrameBuffers:
    """Inputs, outputs and counters of one frame step. `pos` is the row the next step processes; each step
    increments it on the device, so replays need no host-side position update."""

    pos: torch.Tensor  # (1,) int64
    seed: torch.Tensor  # (1,) int64, the request's sampling seed
    frame: torch.Tensor  # (11,) int64: the row at `pos` on entry, the predicted frame on exit
    hidden: torch.Tensor  # (1, hidden): backbone output at `pos`, the predict step's input
    force: torch.Tensor  # (11,) int64 teacher frame, used where use_force
    use_force: torch.Tensor  # (1,) bool
    main_logits: torch.Tensor  # (1 + codebook_size,) float32
    code_logits: torch.Tensor  # (num_codebooks - 1, head_size) float32
    history: torch.Tensor  # (max_context_rows, 11) int64: history[p] = the frame predicted at row p
    rows: torch.Tensor  # (max_context_rows,) int64 arange, sliced for attention masks and counters


class StaticState:
    def __init__(self, config: Drama3Config, dtype: torch.dtype, device: torch.device) -> None:
        b, t, n = config.backbone, config.tower, config.max_context_rows
        self.config, self.dtype, self.device = config, dtype, device
        kd, vd = b.linear_num_key_heads * b.linear_key_head_dim, b.linear_num_value_heads * b.linear_value_head_dim
        self.backbone: list[StaticKVCache | DeltaNetState] = [
            StaticKVCache(n, b.num_key_value_heads, b.head_dim, dtype, device) if b.is_full_attention(i)
            else DeltaNetState.zeros(b.linear_conv_kernel, 2 * kd + vd, b.linear_num_value_heads,
                                     b.linear_key_head_dim, b.linear_value_head_dim, dtype, device)
            for i in range(b.num_layers)
        ]
        self.tower = [StaticKVCache(n, t.num_key_value_heads, t.head_dim, dtype, device)
                      for _ in range(config.num_tower_layers)]
        long = {"dtype": torch.long, "device": device}
        self.buf = FrameBuffers(
            pos=torch.zeros(1, **long), seed=torch.zeros(1, **long), frame=torch.zeros(ROW_WIDTH, **long),
            hidden=torch.zeros((1, config.hidden_size), dtype=dtype, device=device),
            force=torch.zeros(ROW_WIDTH, **long), use_force=torch.zeros(1, dtype=torch.bool, device=device),
            main_logits=torch.zeros(1 + config.codebook_size, dtype=torch.float32, device=device),
            code_logits=torch.zeros((config.num_codebooks - 1, t.head_size), dtype=torch.float32, device=device),
            history=torch.zeros((n, ROW_WIDTH), **long), rows=torch.arange(n, **long),
        )
        self._recent: dict[int, torch.Tensor] = {}

    def recent(self, window: int) -> torch.Tensor:
        """The RAS window of the last `window` main indices (-1 = empty). One buffer per window size, never
        freed, because captured graphs keep its address."""
        if window not in self._recent:
            self._recent[window] = torch.full((window,), -1, dtype=torch.long, device=self.device)
        return self._recent[window]

    def reset(self, seed: int, window: int, last_row: torch.Tensor, position: int) -> None:
        """Start a request: empty caches and states; the prompt's last row, at `position`, is the next step's
        input row."""
        for cache in self.backbone + self.tower:
            if isinstance(cache, StaticKVCache):
                cache.length = 0
            else:
                cache.conv.zero_()
                cache.recurrent.zero_()
        self.recent(window).fill_(-1)
        self.buf.seed.fill_(seed)
        self.buf.frame.copy_(last_row)
        self.buf.pos.fill_(position)

    def prefill_caches(self) -> list[StaticKVCache | DeltaNetState]:
        """Backbone caches for the eager prefill. DeltaNet states are fresh wrappers around the static tensors,
        because the prefill may rebind `state.conv` / `state.recurrent`; `absorb` copies any rebinding back."""
        return [c if isinstance(c, StaticKVCache) else DeltaNetState(conv=c.conv, recurrent=c.recurrent)
                for c in self.backbone]

    def absorb(self, caches: list[StaticKVCache | DeltaNetState]) -> None:
        for static, used in zip(self.backbone, caches):
            if isinstance(static, DeltaNetState):
                if used.conv is not static.conv:
                    static.conv.copy_(used.conv)
                if used.recurrent is not static.recurrent:
                    static.recurrent.copy_(used.recurrent)

    def mutable(self) -> list[torch.Tensor]:
        """Every tensor a frame step updates in place other than KV rows at `pos` (which the real step rewrites
        with the same values): what a warm-up run before graph capture must leave untouched."""
        b = self.buf
        states = [t for c in self.backbone if isinstance(c, DeltaNetState) for t in (c.conv, c.recurrent)]
        return states + list(self._recent.values()) + [b.pos, b.frame, b.hidden, b.main_logits, b.code_logits]
