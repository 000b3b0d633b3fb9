"""triton_prefill_gemm: the eager model's projections back to the 2048-wide residual from wider inputs (DeltaNet's
and attention's out_proj, the tower's eh_proj and MLP down: the prefill's, compiled or not) as a split-K Triton
GEMM through one custom op; the CPU path keeps F.linear. The kernel files live in templates/triton_prefill_gemm/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

DELTANET, ATTENTION, TOWER = "deltanet.py", "attention.py", "tower.py"
_IMPORT = "from .split_k_gemm_op import linear\n"
# (file, the import line after which ours goes, the projection's call, the same through the op)
_SITES = (
    (DELTANET, "from .layers import gated_rms_norm, take\n",
     "        return F.linear(o.reshape(T, vd), self.out_proj)\n",
     "        return linear(o.reshape(T, vd), self.out_proj)  # triton_prefill_gemm\n"),
    (ATTENTION, "from .layers import apply_rope, rms_norm, take\n",
     "        return F.linear(out.reshape(T, g.num_heads * g.head_dim), self.o_proj)\n",
     "        return linear(out.reshape(T, g.num_heads * g.head_dim), self.o_proj)  # triton_prefill_gemm\n"),
)
_EH = """\
        x = F.linear(torch.cat((rms_norm(e, self.enorm, self.eps), rms_norm(h, self.hnorm, self.eps)), -1),
                     self.eh_proj)
"""
_DOWN = "            x = x + F.linear(F.silu(gate) * up, self.down_proj)\n"  # prefill_fused_projections' MLP

KNOBS = Knobs("prefill_gemm_params.py", "triton_prefill_gemm", {
    "block_m": "rows per output tile",
    "block_n": "columns per output tile",
    "block_k": "inputs per step of a slice",
    "programs": "programs a call may launch: few rows take more slices of the depth, up to max_split",
    "max_split": "the most slices of the depth (each a program per output tile; a second kernel sums them)",
    "num_warps": "",
    "num_stages": "the steps whose loads are in flight while one multiplies",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    counts = {name: int(params[name]) for name in ("programs", "num_stages")}
    if min(counts.values()) < 1:
        raise ValueError(f"triton_prefill_gemm: programs and num_stages must be at least 1, got {counts}")
    sizes = KNOBS.powers_of_two(params, ("block_m", "block_n", "block_k", "max_split", "num_warps"))
    patches = [*template_files(files, "triton_prefill_gemm"), KNOBS.patch(sizes | counts)]
    for path, anchor, call, through_op in _SITES:
        patches += [replace_once(files, path, call, through_op),
                    replace_once(files, path, anchor, anchor + _IMPORT)]
    return patches + [
        replace_once(files, TOWER, _EH, _EH.replace("x = F.linear(", "x = linear(")
                     .replace("                     self.eh_proj", "                   self.eh_proj")),
        replace_once(files, TOWER, _DOWN, _DOWN.replace("F.linear(", "linear(")),
        replace_once(files, TOWER, "from .layers import rms_norm, swiglu, take\n",
                     "from .layers import rms_norm, swiglu, take\n" + _IMPORT),
    ]


triton_prefill_gemm = Transform(
    name="triton_prefill_gemm",
    summary="run the prefill's 2048-wide out-projections (DeltaNet and attention out_proj, tower eh_proj and MLP "
            "down, inputs 4096-6144 wide) as a split-K Triton GEMM: at a prompt's 64-224 rows they have too few "
            "output tiles to fill the SMs, so each slice of the depth gets its own programs",
    feature="prefill",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_prefill_gemm",),
    apply=_apply,
    space={"block_m": (64, 128), "block_n": (128, 64), "block_k": (64, 128), "programs": (256, 128, 512),
           "max_split": (8, 4, 16), "num_warps": (4, 8), "num_stages": (4, 3)},
    requires=("cuda_graph_prefill", "prefill_fused_projections"),
    lesson="At a prompt's rows (64-224 in the row buckets) a projection to the 2048-wide residual has 4-64 output "
           "tiles, and cuBLAS walks each tile's whole 4096-6144 inputs on one SM: session 33's H100 profile of the "
           "voice prefill held 79 such launches of 64x64 tiles, 14.6 us each (1.15 ms). Split-K gives every slice "
           "of the depth its own program; the partial sums go through fp32 and a second kernel adds them in a "
           "fixed order (no atomics: the same bits each run), one rounding to bf16 as F.linear's. Wider "
           "projections (the in-projections, q|k|v, gate|up) have tiles enough and stay with cuBLAS.",
)
