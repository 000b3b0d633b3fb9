"""One-row gated attention over a static KV cache: the row's key/value are written at `pos` and the query
attends to rows [0, span) with rows after `pos` masked, so the shapes (and a captured graph) depend only on
the span bucket, not on the position.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import AttentionGeometry
from .decode_ops import RopeTable, norm
from .decode_weights import AttnWeights
from .static_state import StaticKVCache


def attention_decode(x: torch.Tensor, w: AttnWeights, geo: AttentionGeometry, cache: StaticKVCache,
                     pos: torch.Tensor, future: torch.Tensor, rope: RopeTable) -> torch.Tensor:
    """x (1, hidden) at row pos (1,); future (span,) bool marks rows > pos. Returns (1, hidden)."""
    nh, nkv, hd = geo.num_heads, geo.num_kv_heads, geo.head_dim
    qg, k, v = w.qkv(x)
    qg = qg.view(nh, 2, hd)
    q = norm(qg[:, 0], w.q_gain, geo.eps)
    k = norm(k.view(nkv, hd), w.k_gain, geo.eps)
    q, k = rope.rotate(torch.cat((q, k)), pos, geo.interleaved_rope).split((nh, nkv))
    cache.keys.index_copy_(0, pos, k[None])
    cache.values.index_copy_(0, pos, v.view(1, nkv, hd))
    span = future.shape[0]
    # fp32 scores and softmax: the bf16 SDPA kernels accumulate in fp32 too
    keys, values = cache.keys[:span].float(), cache.values[:span].float()
    query = q.float().view(nkv, nh // nkv, hd) * hd ** -0.5  # query head h reads kv head h // group
    scores = torch.matmul(query, keys.permute(1, 2, 0)).masked_fill_(future, float("-inf"))
    out = torch.matmul(scores.softmax(-1), values.transpose(0, 1)).reshape(nh, hd)
    out = out * torch.sigmoid(qg[:, 1].float())
    return F.linear(out.to(x.dtype).reshape(1, nh * hd), w.o_proj)
