"""cuda_graph_codec: decode each codec window length from its own CUDA graph (codes zero-padded to a fixed
ladder of lengths; the causal codec makes the padding harmless), instead of ~hundreds of eager kernel launches
per audio chunk. The engine files it adds live in templates/cuda_graph_codec/ (and templates/common/).
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once, template_files

INIT = "__init__.py"
_IMPORT = "from .codec import Codec\n"
_BUILD = "    codec = Codec.from_weights("


def _params_file(params: Params) -> Patch:
    return Patch("codec_graph_params.py", "", f'''\
"""Parameters the cuda_graph_codec transform was applied with."""
LADDER = "{params["ladder"]}"  # graph lengths: "pow2" (1, 2, 4, ...) or "pow2_3" (also 3, 6, 12, ...: less padding)
MAX_GRAPH_FRAMES = {int(params["max_graph_frames"])}  # longer decodes run eagerly (their graphs would hold GBs)
''')


def _apply(files: Files, params: Params) -> list[Patch]:
    if params["ladder"] not in ("pow2", "pow2_3"):
        raise ValueError(f"cuda_graph_codec: ladder must be 'pow2' or 'pow2_3', got {params['ladder']!r}")
    return [
        *template_files(files, "cuda_graph_codec"), *template_files(files, "common"), _params_file(params),
        replace_once(files, INIT, _IMPORT, _IMPORT + "from .codec_graph import GraphedCodec\n"),
        replace_once(files, INIT, _BUILD, "    codec = GraphedCodec.from_weights("),
    ]


cuda_graph_codec = Transform(
    name="cuda_graph_codec",
    # an estimate from the H200 codec timings: a 1-10 frame chunk takes 10.7-18.0 ms eager (sessions 3, 5; the
    # kept engine's codec is eager) and 2.8-3.6 ms graphed; a 12-frame trial decodes 3 chunks, so it saves ~25-45 ms
    # of the kept engine's ~200 ms trial (~1.04x in 200-frame trials)
    impact={"cuda": 1.15},
    summary="replay the codec decode of each (zero-padded) window length as a CUDA graph instead of eager "
            "kernel launches, cutting time to first audio and per-chunk latency",
    feature="codec",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    space={"ladder": ("pow2_3", "pow2"), "max_graph_frames": (256, 1024)},
    lesson="The codec of a short window is launch-bound (hundreds of small kernels), so a graph replay cuts "
           "first-chunk latency most; zero-padding to a ladder length is exact because every codec op is "
           "causal. Each captured length keeps its activations in the graph pool, so keep the largest modest.",
)
