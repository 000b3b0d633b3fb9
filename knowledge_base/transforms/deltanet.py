"""Gated DeltaNet transform: the causal depthwise conv as an unfold-multiply-sum over the few rows of a decode
step, instead of a grouped conv1d call whose per-call setup costs more than the arithmetic.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

_CONV1D = """\
        conv = F.conv1d(window.T[None], self.conv, groups=self.conv_channels)[0].T  # (T, channels)
"""


def _conv_unfold(files: Files, params: Params) -> list[Patch]:
    return [replace_once(files, "deltanet.py", _CONV1D, """\
        # out[t, c] = sum_k w[c, k] * window[t + k, c], accumulated in fp32 like conv1d's kernels do.
        taps = window.unfold(0, self.kernel, 1).float()  # (T, channels, kernel)
        conv = (taps * self.conv[:, 0, :].float()).sum(-1).to(window.dtype)  # (T, channels)
""")]


deltanet_conv_unfold = Transform(
    name="deltanet_conv_unfold",
    impact={"cpu": 1.037,  # measured in the CPU demo (on fp8_dequant_at_build + gqa_sdpa)
            # a guess: eager, a GPU runs conv1d as one kernel and unfold-multiply-sum as several, and the graphed
            # frame has its own DeltaNet step
            "cuda": 1.0},
    # measured on the H200 together with prefill_fused_projections (session 19,
    # docs/measurements/2026-12-05_h200_s19_prefill_fast_check.json): in the inductor-compiled prefill the taps fuse
    # into the next kernel and the depthwise conv kernel (0.72 ms per prefill) is gone; the pair moved TTFA
    # 1.04/1.05/0.99x over the three prompts, half of its 1.024x (geometric mean) each
    first_audio={"cuda": 1.01},
    summary="compute the Gated DeltaNet causal depthwise conv (kernel 4) as unfold-multiply-sum instead of a "
            "grouped conv1d call per layer and step",
    feature="gated_deltanet",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu", "cuda"}),
    apply=_conv_unfold,
    lesson="A decode step convolves 4 rows per channel: on drama3-tiny CPU the conv gets ~10x cheaper; the "
           "fp32 accumulation keeps bf16 results within a rounding of conv1d's. On CUDA it pays only where "
           "inductor fuses the taps (the compiled prefill), where it removes a depthwise conv kernel per layer.",
)
