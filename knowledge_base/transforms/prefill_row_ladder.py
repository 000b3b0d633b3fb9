"""prefill_row_ladder: cuda_graph_prefill's row buckets in ROW_STEPS equal steps per power of two (64, 80, 96, 112,
128, 160, ... for 4) instead of doubling, so a prompt pads to fewer rows: the graph's dense GEMMs, attention and
elementwise steps run on every row of the bucket.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once

GRAPHS = "prefill_graphs.py"
_IMPORT = "from .prefill_graph_params import MIN_PREFILL_ROWS, PREWARM_PREFILL_ROWS\n"
_BUCKET = '''\
        """The row bucket covering `rows`: MIN_PREFILL_ROWS doubled until it fits, capped at the capacity."""
        bucket = MIN_PREFILL_ROWS
        while bucket < rows:
            bucket *= 2
'''

KNOBS = Knobs("prefill_ladder_params.py", "prefill_row_ladder", {
    "row_steps": "row buckets per power of two above MIN_PREFILL_ROWS (1: doubling)",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    steps = KNOBS.powers_of_two(params)["row_steps"]
    return [
        KNOBS.patch({"row_steps": steps}),
        replace_once(files, GRAPHS, _IMPORT, _IMPORT + "from .prefill_ladder_params import ROW_STEPS\n"),
        replace_once(files, GRAPHS, _BUCKET, '''\
        """The row bucket covering `rows`: from MIN_PREFILL_ROWS up in ROW_STEPS equal steps per power of two
        (prefill_row_ladder), capped at the capacity."""
        bucket = MIN_PREFILL_ROWS
        while bucket < rows:
            bucket += max(1, (1 << (bucket.bit_length() - 1)) // ROW_STEPS)
'''),
    ]


prefill_row_ladder = Transform(
    name="prefill_row_ladder",
    # measured on an H100 (session 24, docs/benchmarks.md): with renew triton_prefill_moe and fused_sdpa the
    # prefill walls fell 0.6 / 2.3 / 1.6 ms (hello / sentences / voice) against 1.0 / 1.7 / 1.8 without it in an
    # earlier run: ~0.6 ms for the 135-row prompt (160-row bucket, not 256), nothing measurable for the others;
    # that stack passed the teacher-forced gate (max logit error 0.141)
    first_audio={"cuda": 1.01},
    summary="split each power of two of cuda_graph_prefill's row buckets into equal steps, so a prompt pads to "
            "fewer rows: the graphed prefill's dense GEMMs and elementwise steps run on every row of its bucket",
    feature="prefill",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    apply=_apply,
    space={"row_steps": (4, 2, 8)},
    requires=("cuda_graph_prefill",),
    lesson="Doubling buckets pad a prompt by up to 2x; the routed experts and the delta rule stop at the real row "
           "count, but the dense projections, attention and the inductor-fused steps do not. More buckets are "
           "more graphs captured at build (prewarm_rows bounds them) and more graph memory in the shared pool.",
)
