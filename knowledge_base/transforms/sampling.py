"""Sampling transforms: cut the top-p nucleus from the top-k logits only (k <= 30 for the RAS draw and the nine
code draws) instead of sorting the whole vocabulary, drawing the same exponential noise so that seeded draws
stay the same: in the reference's sampler, and in the graph engine's (cuda_graph_frame's decode_sampling.py).
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

SAMPLING = "sampling.py"

_GREEDY = """\
    if temperature == 0:
        return filter_logits(logits, top_k, 1.0, keep_crossing).argmax(dim=-1)
"""
_TOP_K_SAMPLER = '''\
def sample_top_k(logits: torch.Tensor, top_p: float, top_k: int, keep_crossing: bool,
                 generator: torch.Generator) -> torch.Tensor:
    """`sample` for 0 < top_k < V, on the k largest logits (topk returns them sorted, so the nucleus needs no
    full sort). The noise is still drawn over all V entries: the generator advances exactly as in `sample`."""
    values, indices = logits.topk(top_k, dim=-1)
    if top_p < 1.0:
        sorted_probs = torch.softmax(values, dim=-1)
        mass = sorted_probs.cumsum(dim=-1)
        if keep_crossing:
            drop = mass - sorted_probs >= top_p
        else:
            drop = mass > top_p
            drop[..., 0] = False
        values = values.masked_fill(drop, float("-inf"))
    probs = torch.softmax(values, dim=-1)
    noise = torch.empty_like(logits).exponential_(generator=generator).clamp_min_(torch.finfo(logits.dtype).tiny)
    choice = (probs / noise.gather(-1, indices)).argmax(dim=-1, keepdim=True)
    return indices.gather(-1, choice)[..., 0]


def draw_main('''


def _topk_first(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, SAMPLING, _GREEDY, _GREEDY + """\
    if 0 < top_k < logits.shape[-1]:
        return sample_top_k(logits / temperature, top_p, top_k, keep_crossing, generator)
"""),
        replace_once(files, SAMPLING, "def draw_main(", _TOP_K_SAMPLER),
    ]


topk_first_sampling = Transform(
    name="topk_first_sampling",
    impact={"cpu": 1.017,  # measured alone in the CPU demo (drama3-tiny's 64-wide heads)
            # a guess: the sorts it removes took ~0.4 ms of the 11.8 ms graphed H200 frame, <1% of the ~250 ms eager
            # frame; the graphed frame's sampler is graph_topk_sampling's to rewrite
            "cuda": 1.01},
    summary="sample top-k draws (RAS, codes 1..9) from the k largest logits instead of sorting and scattering "
            "over the whole vocabulary, with the same noise stream so seeded outputs do not change",
    feature="sampling",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_topk_first,
    lesson="Seeded draws are unchanged. Pays on full-size heads (4096 logits, ten top-k draws per frame); "
           "negligible on drama3-tiny's 64-wide heads.",
)


_GRAPH_SAMPLING = "decode_sampling.py"
_GRAPH_GREEDY = """\
    if temperature == 0:
        return filter_logits(logits, top_k, 1.0, keep_crossing).argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p, keep_crossing), dim=-1)
"""
_GRAPH_TOP_K_RACE = '''\
def race_top_k(logits: torch.Tensor, top_p: float, top_k: int, keep_crossing: bool,
               noise: torch.Tensor) -> torch.Tensor:
    """`race` for 0 < top_k < V on the k largest logits: topk returns them sorted, so the nucleus needs no sort
    of the whole vocabulary and no scatter back; each index meets the same noise entry as in `race`."""
    values, indices = logits.topk(top_k, dim=-1)
    if top_p < 1.0:
        probs = torch.softmax(values, dim=-1)
        mass = probs.cumsum(dim=-1)
        if keep_crossing:
            drop = mass - probs >= top_p
        else:  # the most likely token always stays (functional: graph capture forbids a CPU-scalar setitem)
            drop = (mass > top_p) & (torch.arange(top_k, device=logits.device) > 0)
        values = values.masked_fill(drop, float("-inf"))
    choice = (torch.softmax(values, dim=-1) / noise.gather(-1, indices)).argmax(dim=-1, keepdim=True)
    return indices.gather(-1, choice)[..., 0]


def draw_main('''


def _graph_topk_first(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, _GRAPH_SAMPLING, _GRAPH_GREEDY, _GRAPH_GREEDY.replace("    probs = ", """\
    if 0 < top_k < logits.shape[-1]:
        return race_top_k(logits / temperature, top_p, top_k, keep_crossing, noise)
    probs = """)),
        replace_once(files, _GRAPH_SAMPLING, "def draw_main(", _GRAPH_TOP_K_RACE),
    ]


graph_topk_sampling = Transform(
    name="graph_topk_sampling",
    # a guess from the H200 fast checks: the sampling stage took 1.12 ms of an 11.2 ms frame with the full-sort
    # sampler and 0.69 ms in a stack with this one (session 3), at most ~1.04x; the whole frames did not differ
    impact={"cuda": 1.03},
    summary="in the graph engine's sampler, draw top-k-limited tokens (RAS, codes 1..9) from the k largest "
            "logits: a top-k and a k-wide softmax instead of a sort, cumsum and scatter over the whole head",
    feature="sampling",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_graph_topk_first,
    requires=("cuda_graph_frame",),
    lesson="Draws are unchanged (same noise per index). Ten of the frame's eleven draws are top-k limited; the "
           "main draw (top_k 0, top_p 0.9) still sorts the whole 4097-wide head.",
)
