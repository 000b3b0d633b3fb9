"""The Drama 3 backbone (Qwen3.5-MoE text model): 40 layers, layer i full attention iff (i+1) % 4 == 0,
else Gated DeltaNet; every layer x += mixer(input_layernorm(x)); x += moe(post_attention_layernorm(x)).

Input is embed_tokens(main token) only (the "mtp_shared_pre" placement: a frame's codes reach the model through
the tower's first layer). Output: final norm, then the lm_head narrowed to [EOS, semantic band].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights
from reference_runtime.config import Drama3Config
from reference_runtime.weights import narrow_lm_head

from .attention import AttentionGeometry, GatedAttention
from .deltanet import GatedDeltaNet
from .kv_cache import DeltaNetState, KVCache
from .layers import rms_norm, take
from .moe import SparseMoE

LayerCache = KVCache | DeltaNetState


class DecoderLayer:
    def __init__(self, weights: Weights, index: int, config: Drama3Config, device: torch.device) -> None:
        cfg, h = config.backbone, config.hidden_size
        p = f"model.layers.{index}."
        self.eps = cfg.rms_norm_eps
        self.input_layernorm = take(weights, f"{p}input_layernorm.weight", (h,), device)
        self.post_attention_layernorm = take(weights, f"{p}post_attention_layernorm.weight", (h,), device)
        if cfg.is_full_attention(index):
            geo = AttentionGeometry(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rotary_dim,
                                    cfg.rope_theta, interleaved_rope=False, eps=cfg.rms_norm_eps)
            self.mixer: GatedAttention | GatedDeltaNet = GatedAttention(weights, f"{p}self_attn.", h, geo, device)
        else:
            self.mixer = GatedDeltaNet(weights, f"{p}linear_attn.", cfg, device)
        self.moe = SparseMoE(weights, f"{p}mlp.", cfg, device)

    def new_cache(self, dtype: torch.dtype, device: torch.device) -> LayerCache:
        if isinstance(self.mixer, GatedAttention):
            return KVCache()
        return self.mixer.new_state(dtype, device)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, cache: LayerCache | None) -> torch.Tensor:
        x = x + self.mixer(rms_norm(x, self.input_layernorm, self.eps), positions, cache)
        return x + self.moe(rms_norm(x, self.post_attention_layernorm, self.eps))


class Backbone:
    def __init__(self, weights: Weights, config: Drama3Config, device: torch.device) -> None:
        h = config.hidden_size
        self.embed_tokens = take(weights, "model.embed_tokens.weight", (config.vocab_size, h), device)
        self.dtype, self.device = self.embed_tokens.dtype, device
        self.layers = [DecoderLayer(weights, i, config, device) for i in range(config.backbone.num_layers)]
        self.norm = take(weights, "model.norm.weight", (h,), device)
        self.eps = config.backbone.rms_norm_eps
        self.lm_head = narrow_lm_head(config, take(weights, "lm_head.weight", (config.vocab_size, h), device))

    def new_caches(self) -> list[LayerCache]:
        return [layer.new_cache(self.dtype, self.device) for layer in self.layers]

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor,
                 caches: list[LayerCache] | None) -> torch.Tensor:
        """Main tokens (T,) at positions (T,) -> final-normed hidden (T, hidden). caches None = a whole
        sequence from position 0 without incremental state (the forward_full path)."""
        x = F.embedding(tokens, self.embed_tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, None if caches is None else caches[i])
        return rms_norm(x, self.norm, self.eps)

    def main_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(T, hidden) -> (T, 1 + codebook_size) float32 over [EOS, semantic 0..codebook_size-1]."""
        return F.linear(hidden, self.lm_head).float()

    def expert_counts(self) -> torch.Tensor:
        """(num_layers, num_experts) tokens routed to each expert since build."""
        return torch.stack([layer.moe.expert_counts for layer in self.layers])
