"""codec_conv_autotune: each codec window length's CUDA graph captured with cuDNN's benchmark mode on, so the
capture's warm-up run times cuDNN's convolution algorithms for that length's shapes and the graph keeps the
fastest, instead of the heuristics' pick.
"""
from __future__ import annotations

import re

from .base import Files, NotApplicable, Params, Patch, Transform

CODEC = "codec_graph.py"
_CAPTURE = re.compile(r"^( +)(graph, audio = capture\(.*\))\n", re.MULTILINE)


def _apply(files: Files, params: Params) -> list[Patch]:
    source = files.get(CODEC, "")
    found = _CAPTURE.findall(source)
    if len(found) != 1 or "benchmark=True" in source:
        raise NotApplicable(f"{CODEC}: the codec's graph capture this transform wraps is not there (or is wrapped)")
    indent, call = found[0]
    return [Patch(CODEC, f"{indent}{call}\n", f"""\
{indent}cudnn = torch.backends.cudnn
{indent}# codec_conv_autotune: cuDNN times its algorithms for each convolution shape in the capture's warm-up run
{indent}with cudnn.flags(enabled=cudnn.enabled, benchmark=True, benchmark_limit=0,
{indent}                 deterministic=cudnn.deterministic, allow_tf32=cudnn.allow_tf32):
{indent}    {call}
""")]


codec_conv_autotune = Transform(
    name="codec_conv_autotune",
    # measured on an H100 (session 24, docs/benchmarks.md; scripts/gpu_codec_profile.py --inductor): cuDNN's
    # heuristics ran a legacy implicit_convolve_sgemm for some window lengths, 1.76 ms of the 24-frame window's
    # 3.93 and 1.15 of the 96-frame one's 6.73; with this transform those windows took 2.09 and 5.66 ms. A
    # 200-frame stream under the targets' windows decodes one 24 and two 96-frame windows beside its frames, whose
    # time a stream pays about in full: ~4 ms of ~630
    impact={"cuda": 1.006},
    summary="capture each codec window's CUDA graph with cuDNN's benchmark mode on, so its convolutions run the "
            "algorithms cuDNN timed fastest for that window length instead of its heuristics' pick",
    feature="codec",
    devices=frozenset({"cuda"}),
    # gated in a full-size stack with codec_channels_last (session 25, H100)
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_codec",),
    lesson="cuDNN picks a convolution algorithm by heuristics unless torch.backends.cudnn.benchmark is set; then "
           "the first call of each shape times the candidates (benchmark_limit=0: all of them). The codec's "
           "windows have a few fixed lengths (the graph ladder), each timed once, in the capture's warm-up run; "
           "the captured graph keeps the winners. Other algorithms move the waveform by bf16 rounding only. Compare it "
           "in a process of its own: in scripts/gpu_fast_check.py's side by side, after other engines' codecs had "
           "planned the same shapes in the process, it changed nothing (session 24), as if cuDNN's per-process "
           "plan cache kept their heuristic picks.",
)
