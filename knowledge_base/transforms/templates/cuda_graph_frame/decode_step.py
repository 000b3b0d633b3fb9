"""The decode frame as straight-line tensor code over StaticState (no host syncs, no data-dependent shapes), so
it can be captured as a CUDA graph: `backbone` turns the row at pos into the final-normed hidden, `predict` turns
that hidden into main logits, the drawn (or forced) main token, 13 tower layers and 9 code draws, writes the
frame and the logits to the static outputs, and advances pos. Shapes depend only on the attention span bucket.
With COMPILE_STEPS the mixer halves of the backbone layers, the tower layers and the draws go through inductor
(their elementwise ops fuse around the GEMVs; compiled during graph warm-up); the MoE stays as it is.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from reference_runtime.api import SamplingParams
from reference_runtime.config import BackboneConfig, Drama3Config

from .attention import AttentionGeometry
from .decode_attention import attention_decode
from .decode_deltanet import deltanet_decode
from .decode_moe import moe_decode
from .decode_ops import RopeTable, norm
from .decode_sampling import FIRST_CODE, NoiseTable, draw_code, draw_main
from .decode_tower import tower_layer_decode
from .decode_weights import AttnWeights, DecodeWeights, LayerWeights
from .graph_params import COMPILE_STEPS
from .kv_cache import DeltaNetState
from .static_state import StaticKVCache, StaticState
from .tower import is_semantic_token


def _attention_mixer(x: torch.Tensor, moe_out: torch.Tensor, lw: LayerWeights, geo: AttentionGeometry,
                     cache: StaticKVCache, pos: torch.Tensor, future: torch.Tensor,
                     rope: RopeTable) -> tuple[torch.Tensor, torch.Tensor]:
    """(residual stream before the previous layer's MoE output is added, that output) -> (stream after this
    layer's attention, its MoE input)."""
    x = x + moe_out
    x = x + attention_decode(norm(x, lw.input_gain, geo.eps), lw.mixer, geo, cache, pos, future, rope)
    return x, norm(x, lw.post_gain, geo.eps)


def _deltanet_mixer(x: torch.Tensor, moe_out: torch.Tensor, lw: LayerWeights, cfg: BackboneConfig,
                    state: DeltaNetState) -> tuple[torch.Tensor, torch.Tensor]:
    x = x + moe_out
    x = x + deltanet_decode(norm(x, lw.input_gain, cfg.rms_norm_eps), lw.mixer, cfg, state)
    return x, norm(x, lw.post_gain, cfg.rms_norm_eps)


def _step(fn: Callable) -> Callable:
    return torch.compile(fn, dynamic=False) if COMPILE_STEPS else fn


attention_mixer = _step(_attention_mixer)
deltanet_mixer = _step(_deltanet_mixer)
tower_layer = _step(tower_layer_decode)
sample_main = _step(draw_main)
sample_code = _step(draw_code)


class FrameProgram:
    def __init__(self, config: Drama3Config, weights: DecodeWeights, state: StaticState,
                 frame_embedding: Callable[[torch.Tensor], torch.Tensor]) -> None:
        b, t, device = config.backbone, config.tower, state.device
        self.config, self.w, self.state = config, weights, state
        self.frame_embedding = frame_embedding  # tower.Tower.input_frame_embedding: layer 0's summed input codes
        self.backbone_geo = AttentionGeometry(b.num_attention_heads, b.num_key_value_heads, b.head_dim, b.rotary_dim,
                                              b.rope_theta, interleaved_rope=False, eps=b.rms_norm_eps)
        self.tower_geo = AttentionGeometry(t.num_attention_heads, t.num_key_value_heads, t.head_dim, t.rotary_dim,
                                           t.rope_theta, interleaved_rope=True, eps=t.rms_norm_eps)
        rows = config.max_context_rows
        self.backbone_rope = RopeTable(rows, b.rotary_dim, b.rope_theta, device)
        self.tower_rope = (self.backbone_rope if (t.rotary_dim, t.rope_theta) == (b.rotary_dim, b.rope_theta)
                           else RopeTable(rows, t.rotary_dim, t.rope_theta, device))
        width = max(1 + config.codebook_size, t.head_size)
        self.noise = NoiseTable(FIRST_CODE + config.num_codebooks - 1, width, device)

    def run(self, kind: str, span: int, sampling: SamplingParams) -> None:
        """kind "frame": backbone then predict (a decode step); "predict": the first frame after prefill."""
        if kind == "frame":
            self.backbone(span)
        self.predict(span, sampling)

    def backbone(self, span: int) -> None:
        cfg, buf = self.config.backbone, self.state.buf
        future = buf.rows[:span] > buf.pos
        x = F.embedding(buf.frame[:1], self.w.embed)
        moe_out = torch.zeros_like(x)
        for lw, cache in zip(self.w.layers, self.state.backbone):
            if isinstance(lw.mixer, AttnWeights):
                x, h = attention_mixer(x, moe_out, lw, self.backbone_geo, cache, buf.pos, future, self.backbone_rope)
            else:
                x, h = deltanet_mixer(x, moe_out, lw, cfg, cache)
            moe_out = moe_decode(h, lw.moe, cfg)
        buf.hidden.copy_(norm(x + moe_out, self.w.norm_gain, cfg.rms_norm_eps))

    def predict(self, span: int, sampling: SamplingParams) -> None:
        cfg, buf = self.config, self.state.buf
        future = buf.rows[:span] > buf.pos
        main_logits = F.linear(buf.hidden, self.w.lm_head).float()[0]
        noise = self.noise.draw(buf.seed, buf.pos)
        recent = self.state.recent(sampling.ras_window)
        use, force = buf.use_force[0], buf.force
        forced = torch.where(is_semantic_token(cfg, force[0]), force[0] - cfg.semantic_begin + 1, 0)
        index = torch.where(use, forced, sample_main(main_logits, sampling, recent, noise))
        semantic = index > 0
        codes = [(index - 1).clamp_min(0)]
        label_scale = semantic.to(buf.hidden.dtype)
        num_shared, x, logits = cfg.tower.num_shared_layers, buf.hidden, []
        for j, (lw, cache) in enumerate(zip(self.w.tower, self.state.tower)):
            e = F.embedding(codes[max(0, j - num_shared)][None], lw.code_embedding) * label_scale
            if j == 0:
                e = e + self.frame_embedding(buf.frame[None])
            x = tower_layer(x, e, lw, self.tower_geo, cache, buf.pos, future, self.tower_rope)
            if j >= num_shared:
                k = j - num_shared + 1
                logits.append(F.linear(x, self.w.heads[k - 1]).float()[0])
                drawn = sample_code(logits[-1], sampling, cfg.codec.residual_codebook_size, noise[FIRST_CODE + k - 1])
                codes.append(torch.where(use, force[1 + k], drawn))
        main = torch.where(semantic, cfg.semantic_begin + codes[0], cfg.eos_token_id)
        frame = torch.where(use, force, torch.cat((main[None], torch.stack(codes) * semantic)))
        recent.copy_(torch.cat((recent, index[None]))[1:])
        buf.history.index_copy_(0, buf.pos, frame[None])
        buf.frame.copy_(frame)
        buf.main_logits.copy_(main_logits)
        buf.code_logits.copy_(torch.stack(logits))
        buf.pos.add_(1)
