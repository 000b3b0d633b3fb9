"""triton_deltanet_chunks: the delta rule of calls of at least MIN_ROWS tokens (the graphed prefill's buckets) in
chunks on the tensor cores (templates/triton_deltanet_chunks/), the sequential depth T / CHUNK chunk steps instead
of T token steps; shorter calls (the decode step's one token) keep triton_deltanet's recurrent kernel. It routes
deltanet.delta_rule, the one call site every prefill path reaches (triton_deltanet_prep's op calls it too).
"""
from __future__ import annotations

from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

DELTANET = "deltanet.py"
_KERNEL = """\
        from .triton_deltanet import triton_delta_rule

        return triton_delta_rule(q, k, v, beta, g, state, valid)
"""

KNOBS = Knobs("chunked_delta_rule_params.py", "triton_deltanet_chunks", {
    "chunk": "tokens per chunk: the recurrence's sequential steps are T / CHUNK",
    "block_v": "value columns per recurrence program (capped to what tiles dv)",
    "num_warps": "all three kernels",
    "stages": "the recurrence's software pipeline: chunks whose factors load ahead while one computes",
    "min_rows": "calls of at least this many tokens run chunked, shorter ones triton_deltanet's recurrent kernel",
    "precision": "the products' tensor-core passes: tf32x3 (about fp32's precision) or tf32 (one, a 10-bit mantissa)",
})
# one TF32 pass first: 1.5x faster than three at 209 rows (session 30), its 10-bit mantissa finer than the bf16
# activations around the rule; it passed drama3-mid's teacher-forced gate as 3xTF32 did
PRECISIONS = ("tf32", "tf32x3")


def _apply(files: Files, params: Params) -> list[Patch]:
    if KNOBS.path in files:  # its dispatch keeps the recurrent call it falls back to: that text alone cannot tell
        raise NotApplicable("triton_deltanet_chunks is applied already")
    sizes = KNOBS.powers_of_two(params, tuple(name for name in KNOBS.notes if name != "precision"))
    if sizes["chunk"] < 16 or sizes["block_v"] < 16:
        raise ValueError(f"triton_deltanet_chunks: chunk and block_v must be at least 16 (tl.dot's smallest tile), "
                         f"got {sizes}")
    if params["precision"] not in PRECISIONS:
        raise ValueError(f"triton_deltanet_chunks: precision must be one of {PRECISIONS}, got {params['precision']!r}")
    return [
        *template_files(files, "triton_deltanet_chunks"),
        KNOBS.patch(sizes | {"precision": params["precision"]}),
        replace_once(files, DELTANET, _KERNEL, """\
        if q.shape[0] >= MIN_ROWS:  # triton_deltanet_chunks: a prompt's rows in chunks on the tensor cores
            from .chunked_delta_rule import chunked_delta_rule

            return chunked_delta_rule(q, k, v, beta, g, state, valid)
""" + _KERNEL),
        replace_once(files, DELTANET, "from .layers import gated_rms_norm, take\n",
                     "from .chunked_delta_rule_params import MIN_ROWS\nfrom .layers import gated_rms_norm, take\n"),
    ]


triton_deltanet_chunks = Transform(
    name="triton_deltanet_chunks",
    # session 28's form (chunks of 16, the outputs' products inside the sequential loop) measured on an H100
    # (docs/benchmarks.md): 91.7 us a layer call for 209 rows against the recurrent kernel's 97.0, TTFA within
    # noise. Session 30's pipelined form, same H100 test: 209 rows in a 224-row bucket 57.1 us in chunks of 32 with
    # one TF32 pass, 83.9 with 3xTF32, recurrent 97.1; on the session 22 kept engine with the proven leap, one TF32
    # pass took TTFA 14.2 / 21.9 / 20.5 -> 14.1 / 21.2 / 19.0 ms (hello / sentences / voice), frames/s unchanged
    # and with codec_upsample_channels_last that stack passed the full-size teacher-forced gate (max error 0.156)
    first_audio={"cuda": 1.03},
    proven=frozenset({"cuda"}),
    summary="run the prefill's gated delta rule in chunks of 32-64 tokens as tensor-core products (one TF32 pass, or "
            "3xTF32 at about fp32's precision): every chunk's WY factors, then its outputs, in parallel; only the "
            "state's two products per chunk run in order, T / chunk steps instead of T token steps",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_deltanet_chunks",),
    apply=_apply,
    # defaults, compiled for sm_90 at full dims (scripts/ptx_order.py --only chunk): chunk 32, 32 value columns
    # and 4 warps spill no registers in any of the three kernels, and 32 heads x 4 value blocks fill one wave of
    # the recurrence on 132 SMs; chunk 64's factors kernel spilled 1.5-1.7 KB (its 64-row inverse). With 2 stages
    # the recurrence's loads are cp.async copies a chunk ahead: 12 barriers and 3 round trips a kernel, against 22
    # barriers a step and 8 round trips unpipelined (session 29's H100 timing, ~11 us a step, was unpipelined)
    space={"chunk": (32, 64, 16), "block_v": (32, 16, 64), "num_warps": (4, 8), "stages": (2, 4, 1),
           "min_rows": (64, 32, 128), "precision": PRECISIONS},
    requires=("triton_deltanet", "cuda_graph_prefill"),  # the rule with a device row count `valid`
    lesson="The recurrent kernel's prefill is T dependent token steps per layer (~0.46-0.8 us each: a cross-warp "
           "reduction, the state update, another reduction), so long prompts pay it most: ~2.9 ms of a 209-row "
           "prompt's prefill on an H100. The chunk form trades those steps for small matrix products per chunk; "
           "session 12's version was slower than the recurrence because its products ran as fp32 FMA loops "
           "(input_precision ieee), with 64-row chunks; session 28's, 3xTF32 products on 16-row chunks with the "
           "outputs computed inside the sequential loop (5 products a step), only matched it (91.7 against 97 us "
           "for 209 rows): the sequential path must carry the state alone. Here only delta = U - W S and the state "
           "update run in order; the factors and the outputs (from each chunk's stored entering state) run in "
           "parallel. The triangular inverse is exact (forward substitution in 16-row blocks merged by products: a "
           "power series cancels catastrophically in fp32 with correlated keys). 3xTF32 operands take registers: "
           "products over 64 key columns at a time keep the kernels from spilling. Pipelined (the next chunk's "
           "factors loaded while one computes), one TF32 pass took a 209-row layer call from the recurrent "
           "kernel's 97 to 57 us on an H100 (3xTF32: 84), 1.5 ms of a voice prompt's TTFA. Measure against the "
           "recurrent kernel at the prompt sizes of the benchmark (52-209 rows); min_rows keeps short calls "
           "recurrent.",
)
