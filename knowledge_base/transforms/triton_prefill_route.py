"""triton_prefill_route: the front of the eager MoE (the whole prefill's, compiled or not), on top of
triton_prefill_moe: the router and the shared expert's gate, up and gate-of-the-expert projections as one GEMM of
a matrix concatenated at build (+5 MB per layer at full size), and the routing (softmax, top-k, renormalisation,
expert count) as one Triton kernel. In cuda_graph_prefill's padded buckets, the rows past the prompt route to no
expert, so they read no expert weights; an engine whose grouped MoE predates that takes triton_prefill_moe's
renewal along. The kernel file lives in templates/triton_prefill_route/.
"""
from __future__ import annotations

from .base import TEMPLATES, Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files
from .renew import renewal
from .triton_prefill_moe import triton_prefill_moe

MOE, GROUPED = "moe.py", "grouped_moe.py"
_COUNTS = "        self.expert_counts = torch.zeros(E, dtype=torch.long, device=device)\n"
_FRONT = """\
        # the router and the shared expert's three projections as one matrix: one GEMM of a prompt's rows. Zero
        # rows pad it to a multiple of 8 so that each output row starts 16-byte aligned, as cuBLAS's Hopper
        # kernels need: unpadded (1281 rows) the H200 ran an sm_75 fallback kernel, 23 us per layer (session 19)
        front = (self.router, self.shared_gate, self.shared_up, self.shared_expert_gate)
        pad = self.router.new_zeros((-sum(m.shape[0] for m in front) % 8, self.router.shape[1]))
        self.front = torch.cat((*front, pad))
        self.front_sizes = (E, shared, shared, 1, pad.shape[0])
        self.valid: torch.Tensor | None = None  # a padded prefill's prompt rows (on the device): the rest route nowhere
"""
_CALL = """\
        weights, experts = self.route(x)
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
            return self._fused(x, weights, experts)
"""
_ROUTED = """\
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
            from .prefill_route import prefill_route

            logits, gate, up, expert_gate, _ = F.linear(x, self.front).split(self.front_sizes, dim=-1)
            weights, experts = prefill_route(logits, self.top_k, self.expert_counts, self.valid)
            shared = F.linear(F.silu(gate) * up, self.shared_down) * torch.sigmoid(expert_gate)
            return self._fused(x, weights, experts, shared)
        weights, experts = self.route(x)
"""
_SIGNATURE = "    def _fused(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:\n"
_SHARED = """\
                                  self.down_scale, self.block)
        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)
        shared = shared * torch.sigmoid(F.linear(x, self.shared_expert_gate))
"""
_COUNT = "        self.expert_counts.index_add_(0, experts.flatten(), torch.ones_like(experts.flatten()))\n"
PROGRAM = "prefill_program.py"
_LAYERS = """\
        for layer, cache in zip(backbone.layers, caches):
            _dynamic_rows(x)
            x = backbone_layer(layer, x, positions, cache)
"""
_LAYERS_VALID = """\
        for layer, cache in zip(backbone.layers, caches):
            _dynamic_rows(x)
            layer.moe.valid = self.length  # the padding rows go to no expert: their picks would read weights
            x = backbone_layer(layer, x, positions, cache)
            layer.moe.valid = None  # every row of an eager call outside this program is real
"""
_DOC = "expert counts by index_add_: bincount sizes its output on the host)."
KNOBS = Knobs("prefill_route_params.py", "triton_prefill_route", {
    "rows": "tokens per program",
    "num_warps": "",
})


def _padding_patches(files: Files) -> list[Patch]:
    """With cuda_graph_prefill, its program hands each layer's MoE the prompt's row count, so the bucket's padding
    rows read no expert weights (the routed experts are most of a short prompt's prefill)."""
    if PROGRAM not in files:
        return []
    return [replace_once(files, PROGRAM, _LAYERS, _LAYERS_VALID)]


def _todays_grouped_moe(files: Files) -> list[Patch]:
    """triton_prefill_moe's renewal where the engine's grouped_moe.py is older than today's: an older one takes no
    expert id -1 (a padding row's) and would index out of the expert stack."""
    if files.get(GROUPED) == (TEMPLATES / "triton_prefill_moe" / GROUPED).read_text():
        return []
    found = renewal(triton_prefill_moe, files)
    if found is None:
        raise NotApplicable(f"{GROUPED}: older than today's, and triton_prefill_moe cannot be renewed here yet")
    return found.patches


def _apply(files: Files, params: Params) -> list[Patch]:
    rows, warps = int(params["rows"]), int(params["num_warps"])
    if rows & (rows - 1) or warps & (warps - 1):
        raise ValueError(f"triton_prefill_route: rows ({rows}) and num_warps ({warps}) must be powers of two")
    return [
        *_todays_grouped_moe(files),
        *_padding_patches(files),
        *template_files(files, "triton_prefill_route"),
        KNOBS.patch({"rows": rows, "num_warps": warps}),
        replace_once(files, MOE, _COUNTS, _COUNTS + _FRONT),
        replace_once(files, MOE, _CALL, _ROUTED),
        replace_once(files, MOE, _SIGNATURE, _SIGNATURE.replace(
            "experts: torch.Tensor)", "experts: torch.Tensor,\n               shared: torch.Tensor)")),
        replace_once(files, MOE, _SHARED, _SHARED.splitlines(keepends=True)[0]),
        replace_once(files, MOE, _COUNT, ""),
        replace_once(files, MOE, _DOC, "expert counts come with the routing: prefill_route; `shared` is the "
                                       "shared expert's output)."),
    ]


triton_prefill_route = Transform(
    name="triton_prefill_route",
    # the decode frame does not run this code: no frames/s gain. The H200 profile of the kept engine's prefill
    # (session 16): the router's topk took 0.40 ms of the longest prompt's 26.9 ms of prefill kernels, and with the
    # softmax, division, count and three of the four front GEMMs it is ~8 of the ~90 launches per layer
    impact={"cuda": 1.0},
    # measured on the H200 (session 19, docs/measurements/2026-12-05_h200_s19_prefill_fast_check.json), on the kept
    # engine with triton_prefill_moe's renewal that it brings along (one layout kernel per layer): TTFA
    # 25.4/33.0/33.7 -> 19.5/25.8/28.0 ms over the three prompts, 3662 -> 1822 prefill kernels; the front
    # matrix's padding to 8 rows came after that run
    first_audio={"cuda": 1.25},
    summary="run the prefill MoE's front as two launches per layer: one GEMM for the router and the shared "
            "expert's three projections, one Triton kernel for the routing (softmax, top-k, renormalisation, "
            "expert count), instead of four GEMMs and five to six routing launches: an earlier first audio",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_prefill_route",),
    requires=("triton_prefill_moe",),
    apply=_apply,
    space={"rows": (4, 1, 16), "num_warps": (4, 1)},
    lesson="The prefill is a CUDA graph of a few thousand small kernels (the longest benchmark prompt: 3662), so "
           "each launch removed saves its few microseconds of launch and drain. Picks equal torch's topk but "
           "for exact ties of probabilities, where the lower expert id wins.",
)
