"""triton_moe_fused: the graphed decode step's whole MoE after the router + shared-expert GEMV (softmax, top-k,
renormalisation, routed experts, shared expert, sum) as two Triton kernels per layer instead of ~12 kernels, since
the captured frame is bound by its kernel count. Takes over triton_fp8_moe's branch of decode_moe.py (which
it requires, keeping its FP8 decoding in templates/fp8_triton/ and deleting its kernel files); the kernel file lives
in templates/triton_moe_fused/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, delete_file, replace_once, template_files
from .triton_fp8_moe import CALL, MOE, TRITON_CALL

_PROJ = "    logits, shared_gate, shared_up, shared_scale = w.proj(x)\n"


KNOBS = Knobs("fused_moe_params.py", "triton_moe_fused", {
    "block_n": "intermediate rows per gate|up program: k * I / BLOCK_N programs",
    "block_k": "hidden columns per unrolled gate|up load (whole FP8 blocks)",
    "down_block_n": "output rows per down program (hidden / DOWN_BLOCK_N programs)",
    "down_block_k": "intermediate columns per unrolled down load (at most the FP8 block)",
    "num_warps": "gate|up kernel",
    "down_warps": "down kernel: the k experts of a tile spread over the warps",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    sizes = KNOBS.powers_of_two(params)
    return [
        *template_files(files, "triton_moe_fused"), *template_files(files, "fp8_triton"),
        KNOBS.patch(sizes),
        replace_once(files, MOE, _PROJ, _PROJ + """\
    if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
        from .fused_moe import fused_moe_decode

        return fused_moe_decode(x, logits, shared_gate, shared_up, shared_scale, w, cfg)
"""),
        replace_once(files, MOE, TRITON_CALL, CALL),  # that branch is never taken now
        # and nothing calls triton_fp8_moe's kernels any more: the kept engine's diff carries no dead file
        delete_file(files, "triton_moe.py"), delete_file(files, "triton_moe_params.py"),
    ]


triton_moe_fused = Transform(
    name="triton_moe_fused",
    # measured on the H200 by the swarm (session 5, docs/measurements/2026-12-03_h200_s5_swarm_home.tgz):
    # 1.14x (CI 0.99-1.18) on the kept five-transform engine
    impact={"cuda": 1.14},
    summary="run the graphed decode MoE after the router/shared GEMV as two Triton kernels per layer: routing "
            "(softmax, top-k, renormalisation) recomputed in every program of a block-FP8 gate|up + SiLU kernel, "
            "then one down kernel summing the k routed experts and the gated shared expert per output tile",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_moe_fused", "fp8_triton"),
    apply=_apply,
    # defaults and order: scripts/gpu_moe_bench.py on the H200, per layer at full size (session 15, docs/
    # measurements/2026-12-04_h200_s15_moe.json): gate|up 2/2048/1 warp 8.78 us vs 9.19 us for session 10's
    # 8/1024/2 (one warp routes by shuffles, without block barriers), down 8/128/4 warps 6.39 us vs 6.56 us for 4/128/4
    space={"block_n": (2, 8, 4, 16), "block_k": (2048, 1024, 512), "down_block_n": (8, 4, 16),
           "down_block_k": (128, 64), "num_warps": (1, 2, 4), "down_warps": (4, 8, 2)},
    requires=("cuda_graph_frame", "triton_fp8_moe"),
    lesson="In the CUDA-graphed frame each MoE layer was ~12 kernels (GEMV, softmax, top-k, sums, two expert "
           "kernels, shared-expert GEMV and glue), each a few us of latency on bytes that take ~7 us in total at "
           "4.8 TB/s. Routing costs a 1 KB read and 8 reductions, so every gate|up program redoes it rather than "
           "wait for a separate kernel; the down kernel keeps one writer per output row (deterministic, no "
           "atomics). Unrolled reduction loops and small row tiles keep many loads in flight per SM.",
)
