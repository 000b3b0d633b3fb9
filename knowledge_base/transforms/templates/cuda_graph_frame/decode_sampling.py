"""Token draws inside a captured graph: the reference's filters (sampling.filter_logits) and exponential race,
with the Exp(1) noise taken from a counter-based hash of (seed, position, slot, index) instead of a
torch.Generator, so each replay draws fresh noise with no host work and no generator state in the graph.
Draws are therefore not coupled to the reference's; teacher-forced logits are what must match.
"""
from __future__ import annotations

import torch

from reference_runtime.api import SamplingParams

from .sampling import filter_logits

MASK32 = 0xFFFFFFFF
MAIN, RAS, FIRST_CODE = 0, 1, 2  # noise slots: the two main-token draws, then one per residual code


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 (C. Wellons): a 32-bit avalanche hash. Values stay in int64, so a product that overflows
    wraps modulo 2^64 and its low 32 bits (all we keep) are exact."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


class NoiseTable:
    """Exp(1) noise of shape (slots, width) for one frame, a pure function of (seed, position)."""

    def __init__(self, slots: int, width: int, device: torch.device) -> None:
        self.index = torch.arange(slots * width, dtype=torch.long, device=device).view(slots, width)

    def draw(self, seed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        key = _mix32(((seed ^ (seed >> 32)) * 0x9E3779B1 + pos) & MASK32)
        return exponential(_mix32((_mix32(self.index ^ key) + key) & MASK32))


def exponential(bits: torch.Tensor) -> torch.Tensor:
    """32-bit hashes -> Exp(1) noise, finite and > 0. 23 bits, not 24: (2^24 - 0.5) / 2^24 rounds to 1.0 in
    float32, whose noise 0 turns a masked probability into 0 / 0 = NaN, which argmax then picks (seen on the
    H200: a code index past the codec's codebook)."""
    uniform = ((bits >> 9).to(torch.float32) + 0.5) * 2.0 ** -23  # largest: 1 - 2^-24, exact in float32
    return -torch.log(uniform)


def race(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, keep_crossing: bool,
         noise: torch.Tensor) -> torch.Tensor:
    """sampling.sample with the noise given: (..., V) float32 logits -> (...) int64 indices."""
    if temperature == 0:
        return filter_logits(logits, top_k, 1.0, keep_crossing).argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits / temperature, top_k, top_p, keep_crossing), dim=-1)
    return (probs / noise).argmax(dim=-1)


def draw_main(logits: torch.Tensor, params: SamplingParams, recent: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """sampling.draw_main: (1 + codebook_size,) logits -> 0-d index; noise (slots, >= V) for this frame."""
    width = logits.shape[-1]
    first = race(logits, params.temperature, params.top_p, params.top_k, True, noise[MAIN, :width])
    ras = race(logits, params.ras_temperature, params.ras_top_p, params.ras_top_k, True, noise[RAS, :width])
    repeats = (first != 0) & (recent == first).any()
    return torch.where(repeats, ras, first)


def draw_code(logits: torch.Tensor, params: SamplingParams, valid_size: int, noise: torch.Tensor) -> torch.Tensor:
    """sampling.draw_code: code logits (head_size,) -> 0-d code in [0, valid_size)."""
    # masked_fill, not setitem: a Python-scalar setitem copies from a CPU tensor, which graph capture forbids
    logits = logits.masked_fill(torch.arange(logits.shape[-1], device=logits.device) >= valid_size, float("-inf"))
    top_k = min(params.code_top_k, valid_size) if params.code_top_k > 0 else valid_size
    return race(logits, params.code_temperature, params.code_top_p, top_k, False, noise[:logits.shape[-1]])
