"""triton_prefill_moe: the MoE of the eager path (prefill, and the reference's decode) as grouped block-FP8
Triton GEMMs instead of a Python loop over the active experts that dequantises each one per call and syncs
the host. The kernel file lives in templates/triton_prefill_moe/ (and templates/fp8_triton/).
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

MOE = "moe.py"
_CALL = """\
        weights, experts = self.route(x)
        self.expert_counts += torch.bincount(experts.flatten(), minlength=self.expert_counts.numel())
"""
_ROUTE_END = "        return top / top.sum(-1, keepdim=True), experts\n"
_FUSED = '''

    def _fused(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """__call__ with the routed experts as grouped Triton GEMMs on the FP8 tiles, and no host sync (the
        expert counts by index_add_: bincount sizes its output on the host)."""
        from .grouped_moe import grouped_fp8_experts

        self.expert_counts.index_add_(0, experts.flatten(), torch.ones_like(experts.flatten()))
        out = grouped_fp8_experts(x.contiguous(), weights, experts, self.gate_up, self.gate_up_scale, self.down,
                                  self.down_scale, self.block)
        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)
        shared = shared * torch.sigmoid(F.linear(x, self.shared_expert_gate))
        return (out + shared.float()).to(x.dtype)
'''


KNOBS = Knobs("grouped_moe_params.py", "triton_prefill_moe", {
    "block_m": "(token, slot) pairs per block; an expert with fewer pairs pads its block",
    "block_n": "output columns per program (at most the FP8 block) for prompts under LONG_ROWS rows",
    "block_n_long": "output columns per program from LONG_ROWS rows on",
    "long_rows": "prompt rows from which BLOCK_N_LONG tiles the outputs",
    "num_warps": "",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    sizes = KNOBS.powers_of_two(params)
    if min(sizes["block_m"], sizes["block_n"], sizes["block_n_long"]) < 16:
        raise ValueError(f"triton_prefill_moe: the blocks must be at least 16 (tl.dot's smallest tile), got {sizes}")
    return [
        *template_files(files, "triton_prefill_moe"), *template_files(files, "fp8_triton"),
        KNOBS.patch(sizes),
        replace_once(files, MOE, _CALL, """\
        weights, experts = self.route(x)
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
            return self._fused(x, weights, experts)
        self.expert_counts += torch.bincount(experts.flatten(), minlength=self.expert_counts.numel())
"""),
        replace_once(files, MOE, _ROUTE_END, _ROUTE_END + _FUSED),
        replace_once(files, MOE, "import torch\n", "import os\n\nimport torch\n"),
    ]


triton_prefill_moe = Transform(
    name="triton_prefill_moe",
    # measured on the H200 by the swarm: 2.91x and 2.67x the eager reference in 12-frame trials (sessions 2, 3)
    impact={"cuda": 2.8},
    summary="run the eager MoE (the whole prefill, and the reference's own decode) as two grouped Triton GEMMs "
            "over the block-FP8 expert stacks: pairs sorted by expert on the device, each used expert read once "
            "per block of tokens, no per-expert dequantisation and no host sync",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_prefill_moe", "fp8_triton"),
    apply=_apply,
    # block_n by prompt rows: scripts/gpu_prefill_bench.py on the H200 (session 23) put hello's 52 rows fastest at
    # 64 columns (0.182 ms a layer, 128: 0.189) and the voice prompt's 209 at 128 (0.218 ms, 64: 0.228); the
    # 128-row threshold lies between the two measured counts
    space={"block_m": (16, 32, 64), "block_n": (64, 128, 32), "block_n_long": (128, 64), "long_rows": (128, 64, 256),
           "num_warps": (4, 8)},
    lesson="The eager MoE loops over up to 256 active experts per layer with a per-call FP8 dequantisation and a "
           "host sync, which is most of the time to first audio at full size. Grouping pairs by expert keeps the "
           "bytes read near one pass over the used experts; block_m trades padding (short prompts: most experts "
           "get 1-3 tokens) against tensor-core tile size.",
)
