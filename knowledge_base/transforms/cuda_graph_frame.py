"""cuda_graph_frame: the whole decode frame (40 backbone layers, narrowed lm_head, RAS draw, 13 tower layers,
9 heads and code draws) as one CUDA graph replay over static buffers, plus the first frame after prefill as
its own graph. The engine files it adds live in templates/cuda_graph_frame/ (and templates/common/).
"""
from __future__ import annotations

from .base import (
    Files,
    NotApplicable,
    Params,
    Patch,
    Transform,
    replace_once,
    template_files,
)

INIT = "__init__.py"
_IMPORT = "from .engine import ReferenceEngine\n"
_RETURN = "    return ReferenceEngine(config, model, codec, device)\n"


def _params_file(params: Params) -> Patch:
    return Patch("graph_params.py", "", f'''\
"""Parameters the cuda_graph_frame transform was applied with."""
FUSE_PROJECTIONS = {bool(params["fuse_projections"])}  # one GEMV per group of matrices sharing an input
MIN_SPAN = {int(params["min_span"])}  # smallest attention span bucket; spans double up to max_context_rows
EOS_CHECK_EVERY = {int(params["eos_check_every"])}  # frames between EOS checks (host syncs) in generate/stream
PREWARM_ROWS = {int(params["prewarm_rows"])}  # graphs for spans up to this many rows are captured at build
COMPILE_STEPS = False  # inductor-fuse the mixer, tower-layer and draw steps (the inductor_decode_steps transform)
''')


def _apply(files: Files, params: Params) -> list[Patch]:
    if "graphs.py" in files:
        raise NotApplicable("cuda_graph_backbone is in this engine: the whole-frame graph replaces it, apply one")
    return [
        *template_files(files, "cuda_graph_frame"), *template_files(files, "common"), _params_file(params),
        replace_once(files, INIT, _IMPORT, _IMPORT + "from .graph_engine import GraphEngine\n"),
        replace_once(files, INIT, _RETURN, "    return GraphEngine(config, model, codec, device, weights)\n"),
    ]


cuda_graph_frame = Transform(
    name="cuda_graph_frame",
    # measured on the H200: decode 252.6 -> 20.49 ms/frame by CUDA events (docs/benchmarks.md); end to end in
    # the swarm's 12-frame trials, whose time is mostly the eager prefill, 1.52-1.99x
    impact={"cuda": 12.3},
    summary="replay each decode frame (backbone, lm_head, RAS draw, tower, heads) as one CUDA graph over "
            "preallocated KV/DeltaNet state with on-device MoE routing and sampling; sync once per chunk",
    feature="decode_graph",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    space={"fuse_projections": (True, False), "min_span": (256, 1024), "eos_check_every": (16, 4),
           "prewarm_rows": (1024, 0)},
    lesson="At batch 1 the eager frame is thousands of small kernels launched from Python with host syncs "
           "(MoE expert lists, sampling); a CUDA graph removes the launch and sync cost but not the kernels' "
           "own latency, so it pays most together with fused kernels (triton_* transforms). Graphs are keyed by "
           "attention span bucket and sampling params; prefill stays eager and sets the first-chunk latency.",
)
