"""What one decoded frame must read from device memory at batch 1, from the weight table (docs/drama3_arch.md §5):
each backbone and tower weight once, except that only the routed experts a token picks are read, the lm_head only
in its narrowed rows (EOS and the semantic band), and an embedding table only in the rows a frame looks up; then
the Gated DeltaNet states, read and written in float32, and the KV rows of the context so far. A decode step's
ms against these bytes is the bandwidth it reached; these bytes at the GPU's bandwidth are its floor. A prompt's
prefill reads the same backbone weights, except that its rows together route to many more experts (prefill_bytes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .config import Drama3Config
from .weights import weight_shapes

_KIND_BYTES = {"fp8": 1, "scale": 4}  # "compute" tensors take the engine's activation dtype


@dataclass(frozen=True, slots=True)
class FrameBytes:
    backbone: int  # its weights, the routed experts a token picks, the narrowed lm_head
    tower: int  # its layers and the codebook heads
    state: int  # DeltaNet states read and written, KV rows read

    @property
    def total(self) -> int:
        return self.backbone + self.tower + self.state


def frame_bytes(config: Drama3Config, compute_bytes: int = 2, context_rows: int = 1024) -> FrameBytes:
    """compute_bytes: 2 for bf16 weights and KV; context_rows: the rows every attention layer reads."""
    b, t = config.backbone, config.tower
    rows_read = {"model.embed_tokens.weight": 1, "lm_head.weight": 1 + config.codebook_size,
                 "audio_decoder.codebook_embeddings.weight": config.num_codebooks}
    parts = {"model.": 0, "audio_decoder.": 0}
    for name, spec in weight_shapes(config).items():
        size = math.prod(spec.shape) * _KIND_BYTES.get(spec.kind, compute_bytes)
        if name in rows_read or name.endswith("code_embedding.weight"):
            size = size // spec.shape[0] * rows_read.get(name, 1)
        elif ".mlp.experts." in name:
            size = size * b.num_experts_per_tok // b.num_experts
        parts["audio_decoder." if name.startswith("audio_decoder.") else "model."] += size
    deltanet_layers = sum(not b.is_full_attention(i) for i in range(b.num_layers))
    states = deltanet_layers * b.linear_num_value_heads * b.linear_key_head_dim * b.linear_value_head_dim * 4 * 2
    attention_layers = b.num_layers - deltanet_layers + config.num_tower_layers
    kv = attention_layers * context_rows * 2 * t.num_key_value_heads * t.head_dim * compute_bytes
    return FrameBytes(parts["model."], parts["audio_decoder."], states + kv)


def prefill_bytes(config: Drama3Config, experts_read: int, compute_bytes: int = 2) -> int:
    """What a prefill must read at least: every backbone weight once (the embedding and lm_head tables only in a
    frame's rows, as frame_bytes counts them: the prompt's few hundred rows are a rounding error), and of the
    routed experts the `experts_read` (layer, expert) matrices its rows route to (the expert_counts diagnostic).
    Activations, KV rows and states written are left out: at prompt sizes they are tens of MB."""
    b = config.backbone
    per_frame = frame_bytes(config, compute_bytes, context_rows=0)
    expert = sum(math.prod(spec.shape) * _KIND_BYTES.get(spec.kind, compute_bytes)
                 for name, spec in weight_shapes(config).items() if ".mlp.experts." in name)
    per_expert = expert // (b.num_layers * b.num_experts)
    picked_by_one_row = expert * b.num_experts_per_tok // b.num_experts  # what frame_bytes counts of them
    return per_frame.backbone - picked_by_one_row + experts_read * per_expert
