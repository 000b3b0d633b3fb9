"""triton_deltanet: the Gated DeltaNet recurrence (deltanet.delta_rule) as one fused recurrent Triton kernel on
CUDA, instead of T rounds of ~5 small torch ops (with chunk_rows, calls of many tokens as two chunked-form
kernels). Every engine's eager prefill runs delta_rule; where cuda_graph_frame's decode_deltanet.py is present,
its one-token step calls delta_rule too, so the captured decode frame gets the kernel as well. The kernel file
lives in templates/triton_deltanet/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

DELTANET = "deltanet.py"
DECODE = "decode_deltanet.py"
_DOC_END = '    Returns o (T, nv, dv)."""\n'  # the kernel branch goes between it and the loop
_LOOP = "    out = []\n"
_DECODE_STEP = """\
    s = state.recurrent  # (nv, dk, dv) fp32
    s.mul_(torch.exp(g)[:, None, None])
    predicted = torch.bmm(k[:, None, :], s)[:, 0]  # (nv, dv)
    delta = (v.view(nv, dv) - predicted) * beta[:, None]
    s.baddbmm_(k[:, :, None], delta[:, None, :])
    o = torch.bmm(q[:, None, :], s)[:, 0]
"""
_DECODE_IMPORT = "from .decode_weights import DeltaNetWeights\n"


def _decode_patches(files: Files) -> list[Patch]:
    if DECODE not in files:
        return []
    return [
        replace_once(files, DECODE, _DECODE_STEP, "    o = delta_rule(q[None], k[None], v.view(1, nv, dv), beta[None], "
                                                  "g[None], state.recurrent)[0]  # (nv, dv)\n"),
        replace_once(files, DECODE, _DECODE_IMPORT, _DECODE_IMPORT + "from .deltanet import delta_rule\n"),
    ]


KNOBS = Knobs("triton_deltanet_params.py", "triton_deltanet", {
    "block_v": "value columns per program (capped to what tiles dv): smaller = more programs in flight",
    "num_warps": "",
    "chunk_rows": "calls of at least this many tokens run the chunked kernels in chunks of it; 0: never",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    block_v, warps = int(params["block_v"]), int(params["num_warps"])
    chunk_rows = int(params["chunk_rows"])
    if any(n & (n - 1) for n in (block_v, warps, chunk_rows)) or 0 < chunk_rows < 16:
        raise ValueError(f"triton_deltanet: block_v ({block_v}), num_warps ({warps}) and chunk_rows ({chunk_rows}) "
                         "must be powers of two, chunk_rows 0 or >= 16")
    return [
        *template_files(files, "triton_deltanet"),
        KNOBS.patch({"block_v": block_v, "num_warps": warps, "chunk_rows": chunk_rows}),
        replace_once(files, DELTANET, _DOC_END + _LOOP, _DOC_END + """\
    if q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
        from .triton_deltanet import triton_delta_rule

        return triton_delta_rule(q, k, v, beta, g, state)
""" + _LOOP),
        replace_once(files, DELTANET, "import torch\n", "import os\n\nimport torch\n"),
        *_decode_patches(files),
    ]


triton_deltanet = Transform(
    name="triton_deltanet",
    # measured on the H200 by the swarm (session 4): 2.04x on cuda_graph_frame + triton_prefill_moe (kept),
    # 1.37x on triton_prefill_moe alone. Mostly the prefill (the delta rule ~200x faster there, ~6x in decode),
    # which 12-frame trials weigh heavily.
    impact={"cuda": 2.0},
    summary="run the Gated DeltaNet delta rule as one fused recurrent Triton kernel per layer call (state tile "
            "in registers across all tokens) in the eager prefill and, with cuda_graph_frame, the decode step",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_deltanet",),
    apply=_apply,
    # fastest first on H200 at full dims. The chunked form is slower there at prompt sizes (session 12,
    # docs/measurements/2026-12-04_h200_s12_chunked_delta_rule.log, one layer's call in a 256-row bucket with 209
    # valid rows: recurrent 165 us, chunk_rows 64 648 us, 32 1125 us), so it comes last and 32 is not offered
    # One warp on 8 value columns was 12% faster than 16 on 2 in an isolated bench on the H200 (84 vs 96 us at 209
    # rows, scripts/gpu_prefill_bench.py, session 23) but 7% slower inside the graphed prefill on an H100 (3.34 vs
    # 3.12 ms over 30 layers, docs/measurements/2026-12-05_h100_s23_renewals_fast_check.log): not the default; each
    # alone (8 columns on 2 warps, 16 on 1) was slower in the bench, so neither is offered as a retune
    space={"block_v": (16, 32, 64), "num_warps": (2, 4, 8), "chunk_rows": (0, 64)},
    lesson="The reference runs the recurrence token by token: a prefill of T rows is T sequential rounds of tiny "
           "ops per DeltaNet layer, launch-bound (H200, full dims: ~30 ms per layer at 209 rows, ~1 s over the "
           "30 layers); the kernel makes it one launch (~0.16 ms, ~0.75 us per token of sequential latency), so it "
           "pays most on the first-chunk latency of long prompts (voice references). In the graph-captured decode "
           "step it turns ~6 ops per DeltaNet layer into one kernel (15.7 -> 2.5 us), ~3% of a 12 ms frame. "
           "Small block_v (more programs, fewer state registers each) and 2 warps were fastest. The recurrent "
           "kernel's prefill is still T sequential steps (~5 ms over 30 layers at 209 rows on the H200, ~0.8 us "
           "a token); chunk_rows > 0 runs calls of that many tokens or more in the chunked (WY) form instead: "
           "every chunk's factors in parallel, then T / chunk_rows sequential steps of fp32 tile products. On "
           "the H200 at prompt sizes that form was 4x slower than the recurrent kernel (648 vs 165 us per layer "
           "at 209 rows with chunk_rows 64): its tile products do not make up for the extra passes at T < 256.",
)
