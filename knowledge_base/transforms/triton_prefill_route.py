"""triton_prefill_route: the eager MoE's routing (the whole prefill's, compiled or not) as one Triton kernel per
layer, on top of triton_prefill_moe: the softmax, top-k, renormalisation and the expert count in one launch. The
kernel file lives in templates/triton_prefill_route/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

MOE = "moe.py"
_CALL = """\
        weights, experts = self.route(x)
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
            return self._fused(x, weights, experts)
"""
_ROUTED = """\
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # Triton is imported only where it can run
            from .prefill_route import prefill_route

            weights, experts = prefill_route(F.linear(x, self.router), self.top_k, self.expert_counts)
            return self._fused(x, weights, experts)
        weights, experts = self.route(x)
"""
_COUNT = "        self.expert_counts.index_add_(0, experts.flatten(), torch.ones_like(experts.flatten()))\n"
_DOC = "expert counts by index_add_: bincount sizes its output on the host)."
KNOBS = Knobs("prefill_route_params.py", "triton_prefill_route", {
    "rows": "tokens per program",
    "num_warps": "",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    rows, warps = int(params["rows"]), int(params["num_warps"])
    if rows & (rows - 1) or warps & (warps - 1):
        raise ValueError(f"triton_prefill_route: rows ({rows}) and num_warps ({warps}) must be powers of two")
    return [
        *template_files(files, "triton_prefill_route"),
        KNOBS.patch({"rows": rows, "num_warps": warps}),
        replace_once(files, MOE, _CALL, _ROUTED),
        replace_once(files, MOE, _COUNT, ""),
        replace_once(files, MOE, _DOC, "expert counts come with the routing: prefill_route)."),
    ]


triton_prefill_route = Transform(
    name="triton_prefill_route",
    # a guess from the H200 profile of the kept engine's prefill (session 16): the router's topk took 0.40 ms of
    # the longest prompt's 26.9 ms of prefill kernels, and with the softmax, division and count it is 5-6 of the
    # ~90 launches per layer; time to first audio, not frames/s, is what it moves
    impact={"cuda": 1.01},
    summary="run the prefill MoE's routing (softmax over the experts, top-k, renormalisation and the expert "
            "count) as one Triton kernel per layer instead of five to six launches, the topk among them: a "
            "shorter prefill, so an earlier first audio",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_prefill_route",),
    requires=("triton_prefill_moe",),
    apply=_apply,
    space={"rows": (4, 1, 16), "num_warps": (4, 1)},
    lesson="The prefill is a CUDA graph of a few thousand small kernels (the longest benchmark prompt: 3662), so "
           "each launch removed saves its few microseconds of launch and drain. Picks equal torch's topk but "
           "for exact ties of probabilities, where the lower expert id wins.",
)
