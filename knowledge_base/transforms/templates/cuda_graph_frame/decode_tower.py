"""One-row codebook-MTP tower layer over its static KV cache (tower.TowerLayer for T = 1)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import AttentionGeometry
from .decode_attention import attention_decode
from .decode_ops import RopeTable, norm
from .decode_weights import TowerLayerWeights
from .static_state import StaticKVCache


def tower_layer_decode(h: torch.Tensor, e: torch.Tensor, w: TowerLayerWeights, geo: AttentionGeometry,
                       cache: StaticKVCache, pos: torch.Tensor, future: torch.Tensor, rope: RopeTable) -> torch.Tensor:
    """h: the previous layer's output (1, hidden); e: this layer's code embedding (1, hidden)."""
    eps = geo.eps
    x = F.linear(torch.cat((norm(e, w.enorm, eps), norm(h, w.hnorm, eps)), -1), w.eh_proj)
    x = x + attention_decode(norm(x, w.input_gain, eps), w.attn, geo, cache, pos, future, rope)
    gate, up = w.gate_up(norm(x, w.post_gain, eps))
    x = x + F.linear(F.silu(gate) * up, w.down)
    return norm(x, w.final_gain, eps)
