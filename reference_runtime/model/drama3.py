"""Drama3Model: the backbone and the tower together, plus `forward_full`, the cache-free teacher-forced pass
over a whole sequence that the incremental engine (prefill + decode_frame) is tested against.
"""
from __future__ import annotations

import torch

from reference_runtime.api import Weights
from reference_runtime.config import Drama3Config

from .backbone import Backbone
from .tower import Tower, is_semantic_token


class Drama3Model:
    def __init__(self, weights: Weights, config: Drama3Config, device: torch.device) -> None:
        self.config = config
        self.backbone = Backbone(weights, config, device)
        self.tower = Tower(weights, config, device)

    @torch.inference_mode()
    def forward_full(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows (N, 11) -> predictions of rows 1..N-1, each conditioned on the rows before it and, for codes,
        on the row's own earlier codes: main logits (N-1, 1 + codebook_size) and code logits
        (N-1, num_codebooks - 1, head_size), float32. One pass per layer over the whole sequence: plain causal
        attention without a KV cache and the DeltaNet recurrence from a zero state in a single call."""
        positions = torch.arange(rows.shape[0], device=rows.device)
        hidden = self.backbone(rows[:, 0], positions, None)[:-1]
        labels = rows[1:]
        code_logits = self.tower(hidden, rows[:-1], labels[:, 1], is_semantic_token(self.config, labels[:, 0]),
                                 positions[:-1], None, lambda k, _: labels[:, 1 + k])
        return self.backbone.main_logits(hidden), code_logits
