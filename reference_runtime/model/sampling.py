"""Token draws as pure functions of (logits, params, seeded generator): temperature, top-k, top-p, then an
exponential race, argmax(probs / Exp(1) noise), which samples from probs without a host sync.

Main token: a first draw (request params, keeping the top-p crossing token) and a RAS draw are both computed; the
RAS draw replaces the first when that is a semantic token repeating one of the last ras_window main tokens.
Codes 1..9: top-k clamped to code_top_k, top-p dropping the crossing token, and head indices at or above the
codec's residual codebook size masked out (our choice: the codec has no entries there). Temperature 0 = greedy.
"""
from __future__ import annotations

import torch

from reference_runtime.api import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float, keep_crossing: bool) -> torch.Tensor:
    """Set to -inf every logit outside the top-k (0 = unlimited) and outside the top-p nucleus. With
    keep_crossing the token whose probability takes the mass past top_p stays in; without, it is dropped
    (the most likely token always stays)."""
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
        mass = sorted_probs.cumsum(dim=-1)
        if keep_crossing:
            drop_sorted = mass - sorted_probs >= top_p
        else:
            # the most likely token always stays; functional (no setitem) so the op is CUDA-graph capturable
            drop_sorted = (mass > top_p) & (torch.arange(mass.shape[-1], device=mass.device) > 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, keep_crossing: bool,
           generator: torch.Generator) -> torch.Tensor:
    """(..., V) float32 logits -> (...) int64 indices."""
    if temperature == 0:
        return filter_logits(logits, top_k, 1.0, keep_crossing).argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p, keep_crossing), dim=-1)
    noise = torch.empty_like(probs).exponential_(generator=generator).clamp_min_(torch.finfo(probs.dtype).tiny)
    return (probs / noise).argmax(dim=-1)


def draw_main(logits: torch.Tensor, params: SamplingParams, recent: torch.Tensor,
              generator: torch.Generator) -> torch.Tensor:
    """Main logits (1 + codebook_size,) over [EOS, semantic...] -> index (0-d int64); `recent` holds the last
    ras_window drawn indices (-1 where the window is not yet full)."""
    first = sample(logits, params.temperature, params.top_p, params.top_k, True, generator)
    ras = sample(logits, params.ras_temperature, params.ras_top_p, params.ras_top_k, True, generator)
    repeats = (first != 0) & (recent == first).any()
    return torch.where(repeats, ras, first)


def draw_code(logits: torch.Tensor, params: SamplingParams, valid_size: int,
              generator: torch.Generator) -> torch.Tensor:
    """Code logits (T, head_size) -> codes (T,) in [0, valid_size)."""
    logits = logits.clone()
    logits[..., valid_size:] = float("-inf")
    top_k = min(params.code_top_k, valid_size) if params.code_top_k > 0 else valid_size
    return sample(logits, params.code_temperature, params.code_top_p, top_k, False, generator)
