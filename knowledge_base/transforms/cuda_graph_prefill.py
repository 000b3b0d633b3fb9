"""cuda_graph_prefill: GraphEngine.prefill's model work (the backbone over the prompt, the teacher-forced tower,
the last row's hidden) replayed as one CUDA graph per power-of-two row bucket over static input rows padded to
the bucket, with the prompt's row count in a device tensor. It builds on cuda_graph_frame (the graph engine and
its static state), triton_prefill_moe (a prefill MoE without host syncs, so it can be captured) and
triton_deltanet (whose kernel stops the recurrence at the device row count). With compile_steps the captured
program's backbone layers and tower are inductor-compiled first (one compile, dynamic in the rows, for all
buckets). The engine files it adds live in templates/cuda_graph_prefill/.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once, require_files, template_files

ENGINE, DELTANET, KV, MOE = "graph_engine.py", "deltanet.py", "kv_cache.py", "moe.py"
_NEEDS = {"graph_engine.py": "cuda_graph_frame", "grouped_moe.py": "triton_prefill_moe",
          "triton_deltanet.py": "triton_deltanet"}  # a file each required transform adds

_ENGINE_IMPORT = "from .static_state import StaticState\n"
_ENGINE_POOL = '        self._pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None\n'
_ENGINE_PREFILL = """\
        positions = torch.arange(R, device=self.device)
        caches = self.state.prefill_caches()
        hidden = self.model.backbone(rows[:, 0], positions, caches)
        self.state.absorb(caches)
        labels = rows[1:]
        self.model.tower(hidden[:-1], rows[:-1], labels[:, 1], is_semantic_token(self.config, labels[:, 0]),
                         positions[:-1], self.state.tower, lambda k, _: labels[:, 1 + k])
        self.state.buf.hidden.copy_(hidden[-1:])
"""

_RULE_HEAD = """\
               state: torch.Tensor) -> torch.Tensor:
    \"\"\"q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), all fp32; updates state (nv, dk, dv) in place.
    Returns o (T, nv, dv).\"\"\"
"""
_RULE_KERNEL = "        return triton_delta_rule(q, k, v, beta, g, state)\n    out = []\n"
_CONV_STATE = "        state.conv = window[-(self.kernel - 1):].clone()\n"
_RULE_CALL = "        o = delta_rule(q, k, v.view(T, self.nv, self.dv), beta, g, state.recurrent)\n"
_STATE_FIELD = "    recurrent: torch.Tensor  # (value_heads, key_head_dim, value_head_dim) float32\n"
_DELTANET_IMPORT = "from .layers import gated_rms_norm, take\n"
_GROUPED_IMPORT = "        from .grouped_moe import grouped_fp8_experts\n"
_GROUPED_CALL = "        out = grouped_fp8_experts("


def _params_file(min_rows: int, prewarm_rows: int, compile_steps: bool) -> Patch:
    return Patch("prefill_graph_params.py", "", f'''\
"""Parameters the cuda_graph_prefill transform was applied with."""
MIN_PREFILL_ROWS = {min_rows}  # smallest row bucket; buckets double up to min(max_prompt_rows, max_context_rows)
PREWARM_PREFILL_ROWS = {prewarm_rows}  # prefill graphs for buckets up to this many rows are captured at build
COMPILE_STEPS = {compile_steps}  # inductor-fuse each backbone layer's and the tower's ops (dynamic in the rows)
''')


def _engine_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, ENGINE, _ENGINE_IMPORT, "from .prefill_graphs import PrefillGraphs\n" + _ENGINE_IMPORT),
        replace_once(files, ENGINE, _ENGINE_POOL, _ENGINE_POOL + """\
        self.prefill_graphs = PrefillGraphs(config, model, self.state, self._pool)
"""),
        replace_once(files, ENGINE, _ENGINE_PREFILL, "        self.prefill_graphs.run(rows)\n"),
        replace_once(files, ENGINE, "from .tower import is_semantic_token\n", ""),  # its one use was the block above
        replace_once(files, ENGINE, "prefill runs the model eagerly into StaticState's caches, then the predict step "
                                    "(the first frame: lm_head, draw,\ntower)",
                     "prefill replays a prefill graph (prefill_graphs.py) into StaticState's caches, then the predict "
                     "step (the\nfirst frame: lm_head, draw, tower)"),
    ]


def _valid_length_patches(files: Files) -> list[Patch]:
    """DeltaNetState.valid: a device row count past which a call's tokens leave the state alone."""
    return [
        replace_once(files, KV, _STATE_FIELD, _STATE_FIELD + """\
    # (1,) int64 on the device, or None (all): only the first `valid` tokens of the next call advance the state,
    # for a prefill padded to a CUDA graph's row bucket
    valid: torch.Tensor | None = None
"""),
        replace_once(files, DELTANET, _RULE_HEAD, """\
               state: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    \"\"\"q, k (T, nv, dk), v (T, nv, dv), beta, g (T, nv), all fp32; updates state (nv, dk, dv) in place.
    Returns o (T, nv, dv). With `valid` ((1,) int64 on the device) only the first `valid` tokens advance the
    state, and the outputs of the rest are zero.\"\"\"
"""),
        replace_once(files, DELTANET, _RULE_KERNEL, """\
        return triton_delta_rule(q, k, v, beta, g, state, valid)
    if valid is not None:  # the rest become identity steps: decay exp(0) = 1, beta 0, and zero queries
        live = (torch.arange(q.shape[0], device=q.device) < valid)[:, None]
        q, beta, g = q * live[..., None], beta * live, g * live
    out = []
"""),
        replace_once(files, DELTANET, _CONV_STATE, """\
        if state.valid is None:
            state.conv = window[-(self.kernel - 1):].clone()
        else:  # the kernel - 1 inputs before row `valid`: window rows valid .. valid + kernel - 2
            state.conv = window.index_select(0, state.valid + torch.arange(self.kernel - 1, device=x.device))
"""),
        replace_once(files, DELTANET, _RULE_CALL, _RULE_CALL.replace("recurrent)", "recurrent, state.valid)")
                     .replace("delta_rule(", "delta_rule_op(")),  # prefill_ops' op (_op_patches)
    ]


def _op_patches(files: Files) -> list[Patch]:
    """The prefill's delta rule and grouped experts called through prefill_ops' custom ops (opaque to
    torch.compile). The decode step's delta_rule calls stay as they are."""
    return [
        replace_once(files, DELTANET, _DELTANET_IMPORT, _DELTANET_IMPORT + "from .prefill_ops import delta_rule_op\n"),
        replace_once(files, MOE, _GROUPED_IMPORT, "        from .prefill_ops import grouped_experts_op\n"),
        replace_once(files, MOE, _GROUPED_CALL, "        out = grouped_experts_op("),
    ]


def _apply(files: Files, params: Params) -> list[Patch]:
    require_files(files, "cuda_graph_prefill", _NEEDS)
    min_rows, prewarm_rows = int(params["min_rows"]), int(params["prewarm_rows"])
    if min_rows < 2 or min_rows & (min_rows - 1):
        raise ValueError(f"cuda_graph_prefill: min_rows ({min_rows}) must be a power of two >= 2")
    return [*template_files(files, "cuda_graph_prefill"),
            _params_file(min_rows, prewarm_rows, bool(params["compile_steps"])), *_engine_patches(files),
            *_valid_length_patches(files), *_op_patches(files)]


cuda_graph_prefill = Transform(
    name="cuda_graph_prefill",
    # measured on the H200 by the swarm (session 4): kept at 1.68x on i004.s00 (1.30x, noisy, on i003.s00)
    impact={"cuda": 1.68},
    summary="replay the prefill (backbone over the prompt, teacher-forced tower) as one CUDA graph per "
            "power-of-two row bucket over padded static input rows, the row count on the device: the DeltaNet "
            "recurrence stops there and causal masking keeps the real rows exact; optionally inductor-fused first",
    feature="prefill",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    space={"compile_steps": (True, False), "min_rows": (64, 32, 128), "prewarm_rows": (512, 2048, 0)},
    requires=("cuda_graph_frame", "triton_prefill_moe", "triton_deltanet"),
    lesson="With the grouped MoE and the DeltaNet kernel the H200 prefill is ~160 ms at any prompt length: 40 "
           "layers of small eager ops, launch-bound, and all of the time to first audio but the first frame. "
           "A graph per row bucket removes the launches; padding costs up to 2x the rows in MoE, attention and "
           "projections at a bucket's low end (smaller min_rows: less padding, more graphs to capture). A bucket "
           "above prewarm_rows is captured on the first prompt that needs it, which pays the capture once. Inside "
           "the graph the prefill is still ~8,600 small kernels (H200, 209 rows: ~39 ms of kernel time, of which "
           "the grouped MoE GEMMs ~9.5 ms and the recurrence ~5 ms); compile_steps runs each backbone layer and "
           "the tower through inductor before capture (the Triton calls are opaque custom ops), fusing the norms, "
           "casts, gates, routing and projections' glue into far fewer kernels, at the cost of one compile "
           "(dynamic in the rows, shared by all buckets) at build.",
)
