"""GraphEngine.prefill's model work over static input rows padded to a row bucket, as straight-line tensor code
whose shapes depend only on the bucket, so one captured CUDA graph serves every prompt of up to that many rows:
the backbone over the bucket's rows into StaticState's caches, the teacher-forced tower over its rows
0..bucket-2, and the backbone output of row R-1 into buf.hidden. R, the prompt's row count, lives in a device
tensor (`length`) that every R-dependent step reads; no Python int depends on it.

The padding follows the real rows, so causal attention and the causal conv leave the real rows exact, and:
- the DeltaNet recurrence stops after R tokens and its conv state is the kernel - 1 inputs before row R
  (DeltaNetState.valid, read by GatedDeltaNet and the triton_deltanet kernel);
- KV rows from R on (the tower's from R - 1 on, whose label is padding) hold padding, which the predict and
  decode steps overwrite before reading: each writes row pos first and masks rows > pos. StaticKVCache.length,
  the counter of `append`, means nothing after a prefill (a replay leaves it as state.reset set it): the graph
  engine's steps index by buf.pos and never read it;
- the padded tokens' MoE reads the experts they route to and shows in the expert_counts diagnostic, unless the
  MoE routes rows past `moe.valid` to none (triton_prefill_route sets it here).

With COMPILE_STEPS each backbone layer (one compile per mixer kind, shared by the layers) and the whole tower go
through inductor, their row dims marked dynamic so that one compile serves every bucket; the delta rule and the
grouped MoE inside are opaque custom ops (prefill_ops.py). They compile in the warm-up run before a capture.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from reference_runtime.api import ROW_WIDTH
from reference_runtime.config import Drama3Config

from .backbone import DecoderLayer
from .drama3 import Drama3Model
from .kv_cache import DeltaNetState
from .layers import rms_norm
from .prefill_graph_params import COMPILE_STEPS
from .static_state import StaticKVCache, StaticState
from .tower import Tower, is_semantic_token


def _step(fn: Callable) -> Callable:
    """fn through inductor if COMPILE_STEPS, shapes dynamic where marked (_dynamic_rows): one compile per kind
    of call for every row bucket."""
    return torch.compile(fn) if COMPILE_STEPS else fn


def _dynamic_rows(*tensors: torch.Tensor) -> None:
    """Mark dim 0 (the rows) dynamic before the first compile, so it is not specialised to the first bucket
    ("maybe": should a guard need a fixed row count, that is a recompile per bucket, not an error)."""
    if COMPILE_STEPS:
        for t in tensors:
            torch._dynamo.maybe_mark_dynamic(t, 0)


backbone_layer = _step(DecoderLayer.__call__)
tower = _step(Tower.__call__)


class PrefillProgram:
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState) -> None:
        self.config, self.model, self.state = config, model, state
        self.capacity = min(config.max_prompt_rows, config.max_context_rows)  # rows of the largest bucket
        self.rows = torch.zeros((self.capacity, ROW_WIDTH), dtype=torch.long, device=state.device)
        self.length = torch.ones(1, dtype=torch.long, device=state.device)  # >= 1 even before a prompt: row
        # length - 1 is gathered, also in the warm-up run of a capture at build

    def load(self, rows: torch.Tensor) -> None:
        """The next run's prompt: rows (R, 11) on the device. Rows past R keep an older prompt's (valid) rows:
        padding only ever reaches padded rows."""
        self.rows[:rows.shape[0]].copy_(rows)
        self.length.fill_(rows.shape[0])

    def run(self, bucket: int) -> None:
        """Prefill the loaded prompt padded to `bucket` rows (>= R) into the state, which state.reset cleared."""
        rows, positions = self.rows[:bucket], self.state.buf.rows[:bucket]
        for cache in self.state.backbone + self.state.tower:
            if isinstance(cache, StaticKVCache):
                cache.length = 0  # append writes from row 0, also after the warm-up run of a capture
        caches = self.state.prefill_caches()
        for cache in caches:
            if isinstance(cache, DeltaNetState):
                cache.valid = self.length
        backbone = self.model.backbone  # Backbone.__call__, a layer at a time
        x = F.embedding(rows[:, 0], backbone.embed_tokens)
        _dynamic_rows(positions)
        for layer, cache in zip(backbone.layers, caches):
            _dynamic_rows(x)
            x = backbone_layer(layer, x, positions, cache)
        hidden = rms_norm(x, backbone.norm, backbone.eps)
        self.state.absorb(caches)
        labels = rows[1:]
        inputs = hidden[:-1], rows[:-1], labels[:, 1], is_semantic_token(self.config, labels[:, 0]), positions[:-1]
        _dynamic_rows(labels, *inputs)
        tower(self.model.tower, *inputs, self.state.tower, lambda k, _: labels[:, 1 + k])
        self.state.buf.hidden.copy_(hidden.index_select(0, self.length - 1))
