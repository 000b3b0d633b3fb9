"""inductor_codec: each codec window length's CUDA graph captures the codec compiled by inductor instead of its
eager ops, so the ~600 small kernels of a window (Snake activations, adds, casts, transposes and layout
conversions around each convolution) become a few fused ones.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

CODEC = "codec_graph.py"
_POOL = "        self._pool: tuple | None = None\n"
_CAPTURE = "capture(lambda: Codec.forward(self, padded),"  # the rest of the call differs between engines' ages


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, CODEC, _POOL, _POOL + """\
        # compiled on the first capture (static), then once more with the length dynamic (torch.compile marks a
        # dimension dynamic when it changes), so every later ladder length reuses the second compile
        self._compiled = torch.compile(lambda codes: Codec.forward(self, codes))
"""),
        replace_once(files, CODEC, _CAPTURE, "capture(lambda: self._compiled(padded),"),
    ]


inductor_codec = Transform(
    name="inductor_codec",
    # measured on the H200 (session 16, tests/gpu/test_gpu_inductor_codec.py, docs/benchmarks.md): graph replays
    # per window 2.60 -> 1.32 ms at 1 frame, 3.41 -> 1.84 at 10, 6.63 -> 3.97 at 64: ~1.3 ms of time to first audio
    # and ~8 ms of a 64-frame stream's ~250 ms
    impact={"cuda": 1.03},
    first_audio={"cuda": 1.05},  # the 1.3 ms of a 1-frame window, of session 16's 26.5-33.9 ms TTFA
    summary="compile the codec with inductor before each window length's CUDA graph capture: its elementwise ops "
            "fuse around the convolutions, cutting a window's kernel count and time to first audio",
    feature="codec",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_codec",),
    lesson="A streamed codec window is launch-bound: the 1-frame window costs almost half the 64-frame one. "
           "Inductor fuses the Snake activations and residual adds; compiling costs two compiles in the first "
           "streams (a static one, then one with a dynamic length), and moves the waveform by bf16 rounding only.",
)
