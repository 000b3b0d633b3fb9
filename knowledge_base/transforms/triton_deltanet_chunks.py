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
    "num_warps": "both kernels",
    "min_rows": "calls of at least this many tokens run chunked, shorter ones triton_deltanet's recurrent kernel",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    if KNOBS.path in files:  # its dispatch keeps the recurrent call it falls back to: that text alone cannot tell
        raise NotApplicable("triton_deltanet_chunks is applied already")
    sizes = KNOBS.powers_of_two(params)
    if sizes["chunk"] < 16 or sizes["block_v"] < 16:
        raise ValueError(f"triton_deltanet_chunks: chunk and block_v must be at least 16 (tl.dot's smallest tile), "
                         f"got {sizes}")
    return [
        *template_files(files, "triton_deltanet_chunks"),
        KNOBS.patch(sizes),
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
    # measured on an H100 (session 28, docs/benchmarks.md): on top of triton_deltanet_prep + prefill_first_frame,
    # time to first audio 14.3 / 21.8 / 20.5 -> 14.3 / 21.8 / 20.3 ms in 200-frame streams side by side (within
    # noise); per layer call at full dims, chunks of 16 took 91.7 us for 209 rows against the recurrent kernel's
    # 97.0 (29.7 against 27.3 for 52 rows): the prompts are too short for the chunks' products to pay. It passed the
    # gate there but stays out of `proven`, which leaps stack: a leap gains nothing from it
    first_audio={"cuda": 1.01},
    summary="run the prefill's gated delta rule in chunks of 16-32 tokens as tensor-core products (3xTF32, about "
            "fp32's precision): the WY factors of every chunk in parallel, then T / chunk sequential steps of "
            "products instead of T token steps",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_deltanet_chunks",),
    apply=_apply,
    # defaults: the one tile compiled for sm_90 at full dims (ptxas -v) without spilling registers: chunk 16, 32
    # value columns, 8 warps (255 registers, 16 barriers a chunk step); 4 warps spilled 208-680 bytes, chunk 32
    # 700-2300 bytes
    space={"chunk": (16, 32), "block_v": (32, 64, 16), "num_warps": (8, 4), "min_rows": (64, 32, 128)},
    requires=("triton_deltanet", "cuda_graph_prefill"),  # the rule with a device row count `valid`
    lesson="The recurrent kernel's prefill is T dependent token steps per layer (~0.46-0.8 us each: a cross-warp "
           "reduction, the state update, another reduction), so long prompts pay it most: ~2.9 ms of a 209-row "
           "prompt's prefill on an H100. The chunk form trades those steps for small matrix products per chunk; "
           "session 12's version was slower than the recurrence because its products ran as fp32 FMA loops "
           "(input_precision ieee), with 64-row chunks. Here the products use 3xTF32 tensor-core passes on 16-32-row "
           "chunks, and the triangular inverse (forward substitution: a power series cancels catastrophically in fp32"
           " with correlated keys) runs in the parallel factors kernel. Measure against the recurrent kernel at the "
           "prompt sizes of the benchmark (52-209 rows); min_rows keeps short calls recurrent.",
)
