"""triton_fp8_moe: the decode step's routed experts (top-k of the block-FP8 stack) as two Triton GEMV kernels
that read the FP8 tiles in place, instead of gathering and dequantising the k experts through fp32 temporaries
(~15x the expert bytes per layer). Needs cuda_graph_frame's decode_moe.py; the kernel file lives in
templates/triton_fp8_moe/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

MOE = "decode_moe.py"
CALL = "    routed = routed_experts(x, top / top.sum(), ids, w, cfg)\n"
TRITON_CALL = """\
    if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
        from .triton_moe import triton_routed_experts

        routed = triton_routed_experts(x, top / top.sum(), ids, w, cfg)
    else:
        routed = routed_experts(x, top / top.sum(), ids, w, cfg)
"""


KNOBS = Knobs("triton_moe_params.py", "triton_fp8_moe", {
    "block_n": "output rows per program (at most the FP8 block): smaller = more programs in flight",
    "num_warps": "",
    "down_slots": "selected experts per down-projection program (capped to what divides top-k)",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    block_n, warps, slots = int(params["block_n"]), int(params["num_warps"]), int(params["down_slots"])
    if block_n & (block_n - 1) or warps & (warps - 1) or slots & (slots - 1):
        raise ValueError(f"triton_fp8_moe: block_n ({block_n}), num_warps ({warps}) and down_slots ({slots}) must be "
                         "powers of two")
    return [
        *template_files(files, "triton_fp8_moe"), *template_files(files, "fp8_triton"),
        KNOBS.patch({"block_n": block_n, "num_warps": warps, "down_slots": slots}),
        replace_once(files, MOE, CALL, TRITON_CALL),
        replace_once(files, MOE, "import torch\n", "import os\n\nimport torch\n"),
    ]


triton_fp8_moe = Transform(
    name="triton_fp8_moe",
    # measured on the H200: decode 20.49 -> 12.11 ms/frame (docs/benchmarks.md); the swarm kept it at 1.42x in
    # 12-frame trials (session 4)
    impact={"cuda": 1.69},
    summary="compute the decode step's top-k routed experts with two Triton FP8 GEMV kernels reading the "
            "128x128-block FP8 weights in place (gate|up + SiLU, then down + weighted sum)",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_fp8_moe", "fp8_triton"),
    apply=_apply,
    space={"block_n": (16, 8, 32), "num_warps": (4, 2, 8), "down_slots": (8, 1, 2)},
    requires=("cuda_graph_frame",),
    lesson="At batch 1 the routed experts are ~1 GB/frame of FP8 weights; dequantising the gathered experts "
           "through fp32 temporaries moves ~15x that, so reading the tiles in place is the largest single decode "
           "win. More, smaller programs (block_n) keep more bytes in flight on 132 SMs. With all 8 experts per "
           "program the down projection has only hidden / block_n programs (22 us per call on the H200, ~5x its "
           "bytes' time); down_slots < 8 splits it across experts at the cost of one small sum.",
)
