"""Cache transform: allocate every KV buffer and DeltaNet state once per engine and reset them in place per
request, instead of fresh state per request and KV buffers that grow (and copy) by doubling.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

KV, ENGINE = "kv_cache.py", "engine.py"

_KV_INIT = """\
    def __init__(self) -> None:
        self._keys: torch.Tensor | None = None  # (capacity, kv_heads, head_dim)
        self._values: torch.Tensor | None = None
        self.length = 0
"""
_KV_GROW = """\
            self._grow(max(end, 2 * self.length, 64), k)
"""
_STATE_ZEROS = """\
    @classmethod
    def zeros("""
_NEW_CACHES = """\
            sampling=sampling, generator=generator, backbone_caches=backbone.new_caches(),
            tower_caches=tower.new_caches(), num_rows=rows.shape[0], last_frame=rows[-1],
"""
_ENGINE_INIT = """\
        self._request: RequestState | None = None
"""


def _static_caches(files: Files, params: Params) -> list[Patch]:
    rows = params["rows"]
    capacity = "config.max_context_rows" if rows == "max_context" else str(int(rows))
    return [
        replace_once(files, KV, _KV_INIT, _KV_INIT + """\
        self.initial_rows = 64  # rows of the first allocation; the engine raises it to the whole context

    def reset(self) -> None:
        \"\"\"Forget every row; the buffers stay allocated for the next request.\"\"\"
        self.length = 0
"""),
        replace_once(files, KV, _KV_GROW, """\
            # Sized once for the whole context on first use; growing again only past that.
            self._grow(max(end, 2 * self.length, self.initial_rows), k)
"""),
        replace_once(files, KV, _STATE_ZEROS, """\
    def reset(self) -> None:
        self.conv.zero_()
        self.recurrent.zero_()

""" + _STATE_ZEROS),
        replace_once(files, ENGINE, _ENGINE_INIT, _ENGINE_INIT + f"""\
        # Allocated once and reset in place by every prefill (a request never outlives the next prefill).
        self._backbone_caches = model.backbone.new_caches()
        self._tower_caches = model.tower.new_caches()
        for cache in self._backbone_caches + self._tower_caches:
            if isinstance(cache, KVCache):
                cache.initial_rows = {capacity}
"""),
        replace_once(files, ENGINE, _NEW_CACHES, """\
            sampling=sampling, generator=generator, backbone_caches=_reset(self._backbone_caches),
            tower_caches=_reset(self._tower_caches), num_rows=rows.shape[0], last_frame=rows[-1],
"""),
        replace_once(files, ENGINE, "class ReferenceEngine:", """\
def _reset(caches: list) -> list:
    for cache in caches:
        cache.reset()
    return caches


class ReferenceEngine:"""),
    ]


static_caches = Transform(
    name="static_caches",
    impact={"cpu": 1.002,  # measured alone in the CPU demo (docs/benchmarks.md)
            # a guess: torch's caching allocator already reuses the buffers, and the graphed frame brings its own
            "cuda": 1.0},
    summary="preallocate KV buffers for the whole context and keep KV/DeltaNet state across requests, "
            "reset in place by prefill, instead of allocating and regrowing them per request",
    feature="gated_attention",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_static_caches,
    space={"rows": ("max_context", 1024)},
    lesson="Small on its own (allocation and regrowth copies per request); static buffers are what CUDA graphs "
           "and fixed-address kernels need.",
)
