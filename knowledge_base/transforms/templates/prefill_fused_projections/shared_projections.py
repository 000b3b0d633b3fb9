"""The eager model's input projections from the graphed frame's fused matrices: the decode weights already hold
each group of matrices that share an input concatenated (cuda_graph_frame's fuse_projections), so the prefill's
layers run one GEMM per group over the prompt's rows, reading those same tensors (no second copy)."""
from __future__ import annotations

from .decode_weights import DecodeWeights, DeltaNetWeights, Projection
from .drama3 import Drama3Model


def _fused(projection: Projection) -> Projection | None:
    """The projection where its matrices are one (else the model keeps its own GEMMs: no fewer launches)."""
    return projection if len(projection.mats) == 1 else None


def share_projections(model: Drama3Model, weights: DecodeWeights) -> None:
    for layer, frame in zip(model.backbone.layers, weights.layers):
        if isinstance(frame.mixer, DeltaNetWeights):
            layer.mixer.in_proj = _fused(frame.mixer.proj)  # q|k|v|z, b|a
        else:
            layer.mixer.qkv = _fused(frame.mixer.qkv)  # query+gate, key, value
    for layer, frame in zip(model.tower.layers, weights.tower):
        layer.self_attn.qkv = _fused(frame.attn.qkv)
        layer.gate_up = _fused(frame.gate_up)
