"""The codebook-MTP tower: 4 shared layers then one residual layer per code 1..9, each with its own KV cache.

Layer j: h_out = final_norm(Block(eh_proj(cat(enorm(e), hnorm(h_in))))), Block = x + gated_attn(input_layernorm(x))
then + SwiGLU(post_attention_layernorm(x)); interleaved partial RoPE. At row p the tower predicts the codes of
frame p+1 from the backbone hidden h_p: layer j embeds code max(0, j-4) of that frame (times is_semantic, so
text and EOS labels contribute nothing), layer 0 also adds the summed codebook embeddings of row p's own codes,
and residual layer 4+k-1 feeds head k-1 -> logits of code k, which is chosen before layer 4+k runs.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights
from reference_runtime.config import Drama3Config

from .attention import AttentionGeometry, GatedAttention
from .kv_cache import KVCache
from .layers import rms_norm, swiglu, take

# (code index k in 1..9, logits (T, head_size) float32) -> codes (T,) int64 fed to the next residual layer
ChooseCode = Callable[[int, torch.Tensor], torch.Tensor]


def is_semantic_token(config: Drama3Config, tokens: torch.Tensor) -> torch.Tensor:
    """Bool mask of main tokens in the semantic band (audio rows); text, special and EOS tokens are False."""
    return (tokens >= config.semantic_begin) & (tokens < config.semantic_begin + config.codebook_size)


class TowerLayer:
    def __init__(self, weights: Weights, index: int, config: Drama3Config, device: torch.device) -> None:
        t, h = config.tower, config.hidden_size
        p = f"audio_decoder.layers.{index}."
        self.eps = t.rms_norm_eps
        self.code_embedding = take(weights, f"{p}code_embedding.weight", (config.codebook_size, h), device)
        self.enorm = take(weights, f"{p}enorm.weight", (h,), device)
        self.hnorm = take(weights, f"{p}hnorm.weight", (h,), device)
        self.eh_proj = take(weights, f"{p}eh_proj.weight", (h, 2 * h), device)
        self.input_layernorm = take(weights, f"{p}input_layernorm.weight", (h,), device)
        geo = AttentionGeometry(t.num_attention_heads, t.num_key_value_heads, t.head_dim, t.rotary_dim,
                                t.rope_theta, interleaved_rope=True, eps=t.rms_norm_eps)
        self.self_attn = GatedAttention(weights, f"{p}self_attn.", h, geo, device)
        self.post_attention_layernorm = take(weights, f"{p}post_attention_layernorm.weight", (h,), device)
        self.gate_proj = take(weights, f"{p}mlp.gate_proj.weight", (t.intermediate_size, h), device)
        self.up_proj = take(weights, f"{p}mlp.up_proj.weight", (t.intermediate_size, h), device)
        self.down_proj = take(weights, f"{p}mlp.down_proj.weight", (h, t.intermediate_size), device)
        self.final_norm = take(weights, f"{p}final_norm.weight", (h,), device)

    def __call__(self, h: torch.Tensor, e: torch.Tensor, positions: torch.Tensor,
                 cache: KVCache | None) -> torch.Tensor:
        x = F.linear(torch.cat((rms_norm(e, self.enorm, self.eps), rms_norm(h, self.hnorm, self.eps)), -1),
                     self.eh_proj)
        x = x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), positions, cache)
        x = x + swiglu(rms_norm(x, self.post_attention_layernorm, self.eps), self.gate_proj, self.up_proj,
                       self.down_proj)
        return rms_norm(x, self.final_norm, self.eps)


class Tower:
    def __init__(self, weights: Weights, config: Drama3Config, device: torch.device) -> None:
        h = config.hidden_size
        self.config = config
        self.codebook_embeddings = take(weights, "audio_decoder.codebook_embeddings.weight",
                                        (config.num_codebooks * config.codebook_size, h), device)
        self.layers = [TowerLayer(weights, j, config, device) for j in range(config.num_tower_layers)]
        self.heads = [take(weights, f"audio_decoder.heads.{k}.weight", (config.tower.head_size, h), device)
                      for k in range(config.num_codebooks - 1)]

    def new_caches(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]

    def input_frame_embedding(self, rows: torch.Tensor) -> torch.Tensor:
        """The "extra" of layer 0: sum over c of codebook_embeddings[c * codebook_size + code_c] of each row
        (T, 11), zero for rows that are not audio frames."""
        cfg = self.config
        offsets = torch.arange(cfg.num_codebooks, device=rows.device) * cfg.codebook_size
        summed = F.embedding(rows[:, 1:] + offsets, self.codebook_embeddings).sum(dim=1)
        return summed * is_semantic_token(cfg, rows[:, 0]).to(summed.dtype)[:, None]

    def __call__(self, hidden: torch.Tensor, rows: torch.Tensor, code0: torch.Tensor, is_semantic: torch.Tensor,
                 positions: torch.Tensor, caches: list[KVCache] | None, choose: ChooseCode) -> torch.Tensor:
        """Backbone hidden (T, hidden) of rows (T, 11) at positions (T,); code0 (T,) and is_semantic (T,) bool of
        the frames being predicted. `choose` picks code k from head k-1's logits (a sample, or the teacher's
        label). Returns code logits (T, num_codebooks - 1, head_size) float32. caches None = positions 0..T-1
        without incremental state."""
        num_shared = self.config.tower.num_shared_layers
        label_scale = is_semantic.to(hidden.dtype)[:, None]
        codes, logits = [code0], []
        x = hidden
        for j, layer in enumerate(self.layers):
            e = F.embedding(codes[max(0, j - num_shared)], layer.code_embedding) * label_scale
            if j == 0:
                e = e + self.input_frame_embedding(rows)
            x = layer(x, e, positions, None if caches is None else caches[j])
            if j >= num_shared:
                k = j - num_shared + 1
                logits.append(F.linear(x, self.heads[k - 1]).float())
                codes.append(choose(k, logits[-1]))
        return torch.stack(logits, dim=1)
