"""inductor_decode_steps: the graphed frame's mixer halves, tower layers and draws compiled by inductor before
capture, so each step's norms, casts, concatenations and gates become a few fused kernels inside the graph.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

_OFF = "COMPILE_STEPS = False"


def _apply(files: Files, params: Params) -> list[Patch]:
    return [replace_once(files, "graph_params.py", _OFF, "COMPILE_STEPS = True")]


inductor_decode_steps = Transform(
    name="inductor_decode_steps",
    # measured on the H200: 11.22 -> 7.81 ms/frame on the fast stack (docs/benchmarks.md); the swarm's 12-frame
    # trials, where the prefill weighs heavily, saw 1.04x (session 5)
    impact={"cuda": 1.44},
    summary="torch.compile (inductor, static shapes) the decode frame's mixer, tower-layer and draw steps "
            "before CUDA graph capture: fewer, fused kernels per frame",
    feature="decode_graph",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame",),
    lesson="Inside a CUDA graph the frame is still bound by its kernel count (thousands of small kernels, a few "
           "us each); inductor fuses the elementwise glue around the GEMVs and custom kernels (on the H200 the "
           "mixers + norms stage went from 4.8 to 2.3 ms). Costs ~40 s of compile at build and moves logits by "
           "bf16 rounding only.",
)
