"""The offline proposer's optimisation transforms for the Drama 3 engine package, by name."""
from __future__ import annotations

from .attention import fused_qkv, gqa_sdpa, rope_tables
from .base import NotApplicable, Params, Patch, Transform
from .caches import static_caches
from .moe import fp8_dequant_at_build, moe_dispatch
from .sampling import topk_first_sampling

ALL: tuple[Transform, ...] = (fp8_dequant_at_build, moe_dispatch, rope_tables, gqa_sdpa, fused_qkv, static_caches,
                              topk_first_sampling)
TRANSFORMS: dict[str, Transform] = {t.name: t for t in ALL}

__all__ = ["ALL", "TRANSFORMS", "NotApplicable", "Params", "Patch", "Transform"]
