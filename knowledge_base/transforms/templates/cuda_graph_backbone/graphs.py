"""The backbone's one-row decode step over static buffers, captured into CUDA graphs (eager off CUDA).

KV buffers are allocated once for the whole context; a step writes its row at a device-side position and
attends over the first `rows` buffer rows (a power-of-two bucket >= position + 1) under a mask, so one graph
per bucket serves every position in it. DeltaNet state is updated in place. Prefill stays eager through the
same buffers (`StaticKV.append` keeps the growing cache's contract: views of exactly the stored rows).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.config import Drama3Config

from .attention import GatedAttention
from .backbone import Backbone
from .kv_cache import DeltaNetState
from .layers import apply_rope, rms_norm


class StaticKV:
    """One attention layer's keys and values, (capacity, kv_heads, head_dim), zero-filled so that masked rows
    are finite (a masked NaN row would still poison the softmax)."""

    def __init__(self, capacity: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.keys = torch.zeros((capacity, kv_heads, head_dim), dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[0]
        self.keys[self.length:end] = k
        self.values[self.length:end] = v
        self.length = end
        return self.keys[:end], self.values[:end]

    def attend(self, attn: GatedAttention, x: torch.Tensor, position: torch.Tensor, rows: int) -> torch.Tensor:
        """GatedAttention for one row x (1, hidden) at device position (1,), over buffer rows [0, rows)."""
        g = attn.geo
        qg = F.linear(x, attn.q_proj).view(1, g.num_heads, 2, g.head_dim)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = F.linear(x, attn.k_proj).view(1, g.num_kv_heads, g.head_dim)
        v = F.linear(x, attn.v_proj).view(1, g.num_kv_heads, g.head_dim)
        q = apply_rope(rms_norm(q, attn.q_norm, g.eps), position, g.rotary_dim, g.rope_theta, g.interleaved_rope)
        k = apply_rope(rms_norm(k, attn.k_norm, g.eps), position, g.rotary_dim, g.rope_theta, g.interleaved_rope)
        self.keys.index_copy_(0, position, k)
        self.values.index_copy_(0, position, v)
        mask = torch.arange(rows, device=x.device)[None, :] <= position[:, None]  # (1, rows)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), self.keys[:rows].transpose(0, 1), self.values[:rows].transpose(0, 1),
            attn_mask=mask, enable_gqa=True,
        ).transpose(0, 1)  # (1, heads, head_dim)
        return F.linear((out * torch.sigmoid(gate)).reshape(1, -1), attn.o_proj)


class GraphedBackbone:
    def __init__(self, backbone: Backbone, config: Drama3Config, device: torch.device, min_bucket: int) -> None:
        cfg = config.backbone
        self.backbone, self.device = backbone, device
        self.capacity = config.max_context_rows
        self.min_bucket = min(min_bucket, self.capacity)
        self.caches: list[StaticKV | DeltaNetState] = [
            StaticKV(self.capacity, cfg.num_key_value_heads, cfg.head_dim, backbone.dtype, device)
            if isinstance(layer.mixer, GatedAttention) else layer.mixer.new_state(backbone.dtype, device)
            for layer in backbone.layers
        ]
        self.token = torch.zeros(1, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.hidden = torch.zeros((1, config.hidden_size), dtype=backbone.dtype, device=device)
        self.capture = device.type == "cuda"
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}

    def reset(self) -> list[StaticKV | DeltaNetState]:
        """Empty every cache for a new request; the list is what prefill runs the backbone with."""
        for cache in self.caches:
            if isinstance(cache, StaticKV):
                cache.reset()
            else:
                cache.conv.zero_()
                cache.recurrent.zero_()
        return self.caches

    def step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        """Final-normed hidden (1, hidden) of main token (1,) at `position`; valid until the next step."""
        assert position < self.capacity, "the engine checks max_context_rows before decoding"
        self.token.copy_(token)
        self.position.fill_(position)
        rows = self.min_bucket
        while rows < position + 1:
            rows *= 2
        rows = min(rows, self.capacity)
        for cache in self.caches:
            if isinstance(cache, StaticKV):
                cache.length = position + 1
        if not self.capture:
            self._forward(rows)
        else:
            graph = self.graphs.get(rows)
            if graph is None:
                graph = self.graphs[rows] = self._record(rows)
            graph.replay()
        return self.hidden

    def _forward(self, rows: int) -> None:
        bb = self.backbone
        x = F.embedding(self.token, bb.embed_tokens)
        for layer, cache in zip(bb.layers, self.caches):
            h = rms_norm(x, layer.input_layernorm, layer.eps)
            if isinstance(cache, StaticKV):
                x = x + cache.attend(layer.mixer, h, self.position, rows)
            else:
                x = x + layer.mixer(h, self.position, cache)
            x = x + layer.moe(rms_norm(x, layer.post_attention_layernorm, layer.eps))
        self.hidden.copy_(rms_norm(x, bb.norm, bb.eps))

    def _record(self, rows: int) -> torch.cuda.CUDAGraph:
        # One eager warm-up on a side stream creates lazy state (tables, cuBLAS workspaces) outside the
        # graph; it advances the DeltaNet state and expert counters, so those are restored before capture.
        # Capture itself only records: the caller's replay runs the step once.
        states = [t for c in self.caches if isinstance(c, DeltaNetState) for t in (c.conv, c.recurrent)]
        states += [layer.moe.expert_counts for layer in self.backbone.layers]
        saved = [t.clone() for t in states]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._forward(rows)
        torch.cuda.current_stream(self.device).wait_stream(side)
        for t, s in zip(states, saved):
            t.copy_(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._forward(rows)
        return graph
