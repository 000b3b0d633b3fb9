"""triton_sampling: the graphed frame's eleven token draws (cuda_graph_frame's decode_sampling.py) as one Triton
kernel each instead of ~10-25 torch kernels (sort or top-k, softmaxes, cumsum, scatter, masks, argmax) plus the
~10 that hash the frame's noise table; the kernels hash their own noise, so the same seeds draw the same tokens.
Stacks with graph_topk_sampling (whose torch race it then bypasses on CUDA). The kernel file lives in
templates/triton_sampling/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

SAMPLING = "decode_sampling.py"
_DRAW = "    def draw(self, seed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:\n"
_MAIN_BODY = "    width = logits.shape[-1]\n    first = race("
_CODE_BODY = "    # masked_fill, not setitem:"
_PREDICATE = '''\
def triton_draws(t: torch.Tensor) -> bool:
    """Whether the draws run as triton_sampling's kernels: on CUDA, and on CPU under the Triton interpreter (tests).
    Triton is imported only there."""
    return t.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


class NoiseTable:
'''


def _dispatch(call: str) -> str:
    name = call.split("(")[0]
    return f"""\
    if triton_draws(logits):
        from .triton_sampling import {name}

        return {call}
"""


KNOBS = Knobs("triton_sampling_params.py", "triton_sampling", {
    "main_warps": "the main draw: 1 + codebook_size logits, an 8192-wide block at full size",
    "code_warps": "a code draw: the residual codebook's valid logits (1024 at full size)",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    warps = KNOBS.powers_of_two(params)
    return [
        *template_files(files, "triton_sampling"),
        KNOBS.patch(warps),
        replace_once(files, SAMPLING, "import torch\n", "import os\n\nimport torch\n"),
        replace_once(files, SAMPLING, "class NoiseTable:\n", _PREDICATE),
        replace_once(files, SAMPLING, _DRAW + "        key = ", _DRAW + """\
        if triton_draws(seed):  # the kernels hash the noise themselves from (seed, position, slot's first index)
            slots = len(self.index)
            return torch.stack((seed.expand(slots), pos.expand(slots), self.index[:, 0]), dim=1)
        key = """),
        replace_once(files, SAMPLING, _MAIN_BODY,
                     _dispatch("triton_draw_main(logits, params, recent, noise, MAIN, RAS)") + _MAIN_BODY),
        replace_once(files, SAMPLING, _CODE_BODY,
                     _dispatch("triton_draw_code(logits, params, valid_size, noise)") + _CODE_BODY),
    ]


triton_sampling = Transform(
    name="triton_sampling",
    # an estimate from the H200 stage timings: sampling took 1.10 of the kept engine's 11.83 ms frame (session 5)
    # and 0.16 ms in the fast stack with these kernels (session 7, another run); ~0.9 ms, of which 12-frame
    # trials see ~3/4
    impact={"cuda": 1.06},
    summary="draw the graphed frame's main token (both RAS races and the repeat check) and each residual code "
            "with one Triton kernel: temperature, top-k and top-p by bisection over float bit patterns (no sort), "
            "softmax and the exponential race on noise hashed in the kernel (no noise table)",
    feature="sampling",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_sampling",),
    apply=_apply,
    # one-warp code draws were slower in the frame on the H200 (0.154 vs 0.133 ms for 9 draws, session 15)
    space={"main_warps": (16, 8, 32), "code_warps": (4, 8, 2)},
    requires=("cuda_graph_frame",),
    lesson="Seeded draws are unchanged (same hash noise, same filters; only float32 near-ties can differ). The "
           "torch draws were ~25 kernels for the main token (a sort of the 4097-wide head) and ~10 per code, "
           "each a few us even inside the graph, plus ~10 to hash the noise table every frame; the kernels are one "
           "program per draw, ~65 block reductions of bisection each, so they pay by launch count, not bandwidth.",
)
