"""The offline proposer's optimisation transforms for the Drama 3 engine package, by name."""
from __future__ import annotations

from .attention import fused_sdpa, gqa_sdpa, rope_tables
from .base import NotApplicable, Params, Patch, Transform
from .caches import static_caches
from .cuda import compile_tower, cuda_graph_backbone
from .codec_channels_last import codec_channels_last
from .codec_context_trim import codec_context_trim
from .codec_one_frame_attention import codec_one_frame_attention
from .codec_conv_autotune import codec_conv_autotune
from .codec_overlap import codec_overlap
from .codec_upsample_channels_last import codec_upsample_channels_last
from .cuda_graph_codec import cuda_graph_codec
from .cuda_graph_frame import cuda_graph_frame
from .cuda_graph_prefill import cuda_graph_prefill
from .deltanet import deltanet_conv_unfold
from .inductor_codec import inductor_codec
from .inductor_steps import inductor_decode_steps
from .moe import fp8_dequant_at_build, moe_dispatch
from .pipelined_frames import pipelined_frames
from .prefill_first_frame import prefill_first_frame
from .prefill_fused_projections import prefill_fused_projections
from .prefill_row_ladder import prefill_row_ladder
from .prefill_state_zero import prefill_state_zero
from .prefix_moe_cache import prefix_moe_cache
from .prefix_moe_slots import prefix_moe_slots
from .sampling import graph_topk_sampling, topk_first_sampling
from .triton_backbone_attention import triton_backbone_attention
from .triton_backbone_deltanet import triton_backbone_deltanet
from .triton_code_heads import triton_code_heads
from .triton_deltanet import triton_deltanet
from .triton_deltanet_chunks import triton_deltanet_chunks
from .triton_deltanet_prep import triton_deltanet_prep
from .triton_fp8_moe import triton_fp8_moe
from .triton_frame_glue import triton_frame_glue
from .triton_moe_block import triton_moe_block
from .triton_moe_fused import triton_moe_fused
from .triton_prefill_moe import triton_prefill_moe
from .triton_prefill_route import triton_prefill_route
from .triton_sampling import triton_sampling
from .triton_tower import triton_tower

ALL: tuple[Transform, ...] = (fp8_dequant_at_build, moe_dispatch, rope_tables, gqa_sdpa, static_caches,
                              deltanet_conv_unfold, topk_first_sampling, cuda_graph_backbone, compile_tower,
                              cuda_graph_frame, cuda_graph_codec, triton_deltanet, triton_fp8_moe, triton_prefill_moe,
                              cuda_graph_prefill, graph_topk_sampling, inductor_decode_steps, triton_moe_fused,
                              triton_sampling, triton_tower, triton_backbone_attention,
                              triton_backbone_deltanet, triton_moe_block, codec_overlap,
                              inductor_codec, triton_prefill_route, prefill_fused_projections, triton_code_heads,
                              triton_frame_glue, pipelined_frames, fused_sdpa, prefill_row_ladder,
                              codec_conv_autotune, codec_channels_last, prefix_moe_cache, triton_deltanet_prep,
                              prefill_first_frame, triton_deltanet_chunks, codec_upsample_channels_last,
                              codec_context_trim, prefix_moe_slots, prefill_state_zero,
                              codec_one_frame_attention)
TRANSFORMS: dict[str, Transform] = {t.name: t for t in ALL}

__all__ = ["ALL", "TRANSFORMS", "NotApplicable", "Params", "Patch", "Transform"]
