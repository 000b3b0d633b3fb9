"""triton_tower: each codebook-MTP tower layer of the graphed decode frame (cuda_graph_frame's decode_tower.py)
as six Triton kernels instead of ~55 torch kernels: RMSNorms recomputed in the prologue of the GEMV that reads
them, q/k-norm, RoPE and the KV-cache write inside a split-KV attention kernel that also merges its splits and
applies the sigmoid gate, residual adds and the final norm in the epilogues. The kernel file lives in
templates/triton_tower/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

TOWER = "decode_tower.py"
_DOC = '''\
    """h: the previous layer's output (1, hidden); e: this layer's code embedding (1, hidden)."""
'''
_EPS = "    eps = geo.eps\n"
_STEP = "tower_layer = _step(tower_layer_decode)\n"
_CACHE = "        self.values = torch.zeros_like(self.keys)\n"


KNOBS = Knobs("triton_tower_params.py", "triton_tower", {
    "block_n": "output rows per program of the norm-prologue GEMVs (eh_proj, q|k|v, gate|up)",
    "block_k": "input columns per unrolled chunk of those GEMVs",
    "residual_block_n": "output rows per program of the o_proj and down GEMVs (residual epilogue)",
    "residual_block_k": "input columns per unrolled chunk of those GEMVs",
    "residual_warps": "warps of those GEMVs",
    "attn_rows": "KV rows per attention tile (a tl.dot operand: >= 16)",
    "split_rows": "span rows per attention program (at most MAX_SPLITS per kv head)",
    "gemv_warps": "warps of the norm-prologue GEMVs (q|k|v, gate|up, and the DeltaNet layers' qkvz|ba)",
    "num_warps": "warps of eh_proj's GEMV (it holds all its tiles at once) and the attention kernel",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    sizes = {name: int(params[name]) for name in KNOBS.notes}
    if any(v < 1 or v & (v - 1) for v in sizes.values()) or sizes["attn_rows"] < 16:
        raise ValueError(f"triton_tower: every parameter must be a power of two, attn_rows >= 16, got {sizes}")
    return [
        *template_files(files, "triton_tower"),
        KNOBS.patch(sizes),
        replace_once(files, TOWER, "import torch\n", "import os\n\nimport torch\n"),
        replace_once(files, TOWER, _DOC + _EPS, _DOC + """\
    if h.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
        from .triton_tower import triton_tower_layer

        return triton_tower_layer(h, e, w, geo, cache, pos, future, rope)
""" + _EPS),
        # the kernels leave inductor nothing to fuse in the tower step (and it need not trace them)
        replace_once(files, "decode_step.py", _STEP, "tower_layer = tower_layer_decode  # triton_tower's kernels\n"),
        replace_once(files, "static_state.py", _CACHE, _CACHE + """\
        # triton_tower: arrival counters of its last-program epilogues (one per kv head, one for final_norm);
        # each launch's last program puts its counter back to 0
        self.tickets = torch.zeros(kv_heads + 1, dtype=torch.int32, device=device)
"""),
    ]


triton_tower = Transform(
    name="triton_tower",
    # the 13-layer tower step measured alone on the H200 (tests/gpu, docs/benchmarks.md session 6): 1.30 ms in a
    # CUDA graph against 2.59 (torch) and 1.48 (inductor); projected onto the kept engine's 11.8 ms frame, ~1.1x
    impact={"cuda": 1.1},
    summary="run each graphed decode tower layer as six Triton kernels: norm-prologue GEMVs (eh_proj, q|k|v, "
            "gate|up with SiLU), a split-KV attention kernel doing q/k-norm, RoPE, the cache write, the merge and "
            "the sigmoid gate, and o_proj/down GEMVs with the residual (and final_norm) in the epilogue",
    feature="codebook_mtp",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_tower",),
    apply=_apply,
    # GEMV tiles fastest first at the frame's shapes on the H200 (scripts/gpu_gemv_bench.py, docs/benchmarks.md
    # sessions 8 and 15): q|k|v, gate|up and in_proj want (8, 1024) rows and columns with 2 warps (1 or 2 warps
    # reduce by warp shuffles, without block barriers), o_proj and down (8, 1024, 8 warps)
    space={"block_n": (8, 4, 16), "block_k": (1024, 512, 256), "residual_block_n": (8, 4, 16),
           "residual_block_k": (1024, 512), "residual_warps": (8, 4), "attn_rows": (32, 64, 16),
           "split_rows": (64, 128, 32), "gemv_warps": (2, 1, 4), "num_warps": (4, 8)},
    requires=("cuda_graph_frame",),
    lesson="On the H200 the 13-layer tower step, CUDA-graphed, took 1.30 ms with these kernels against 2.59 ms "
           "for the torch step (61 kernels per layer) and 1.48 ms inductor-compiled (27 per layer): 6 kernels per "
           "layer. The GEMV kernels match at full dims, one graph replays at growing positions, and the drama3-mid "
           "engine passes the gate; so does the whole fast stack with it at full size (4.84 ms/frame, tower and "
           "lm_head 1.43 ms of it). That stage read ~2.1 GB of weights at ~1.5 TB/s, a third of the H200's "
           "bandwidth; scripts/gpu_gemv_bench.py then showed the residual GEMVs (o_proj, down) at half the "
           "bandwidth while they reduced once per K chunk: with a 2-D accumulator they run 2.1-2.3x faster per "
           "launch, and the kept engine that took these kernels through a renewal was 1.081x its parent. A "
           "variable re-typed "
           "inside a runtime `if` compiled under the interpreter but "
           "not on the GPU. The graphed torch tower layer is ~55 small kernels (norms, casts, cat, RoPE, cache "
           "copies, softmax, gate) around 5 GEMVs, each a few us; the kernels recompute each RMSNorm in every "
           "GEMV program rather than launch one, and use atomic tickets so the last program of a launch does the "
           "serial tail (split merge, final norm). The tower step is no longer inductor-compiled. Softmax weights "
           "meet bf16 values in bf16 (as SDPA does).",
)
