"""codec_context_trim on CUDA at full codec size, on the kept lineage's codec (graphed, inductor-compiled, timed cuDNN
algorithms, channels-last): each later window of a 200-frame stream under the targets' schedule (32 frames of left
context), its convolutions started context_frames before the chunk, gives the whole window's samples there within
the target's stream gate, and the two graphs' replay times per window are printed side by side
(scripts/gpu_fast_check.py times the streams)."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import tolerances
from test_gpu_inductor_codec import _ms_per_call

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.config import get_config

pytestmark = pytest.mark.gpu
STACK = ["cuda_graph_frame", "cuda_graph_codec", "codec_overlap", "inductor_codec", "codec_conv_autotune",
         "codec_channels_last", "codec_upsample_channels_last", "codec_context_trim"]


def test_trimmed_windows_match_the_whole_windows(load_package):
    config, device = get_config("drama3"), torch.device("cuda")
    pkg = load_package([(TRANSFORMS[n], {}) for n in STACK])
    codec = pkg.codec_graph.GraphedCodec.from_weights(config.codec, init_codec_weights(config.codec, 0, device,
                                                                                       torch.bfloat16),
                                                      device, torch.bfloat16)
    context = importlib.import_module(f"{pkg.__name__}.codec_context").context_frames(config.codec)
    spf, gen = config.codec.frame_samples, torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n, skip in ((20, 10), (32, 20), (64, 32), (96, 32), (40, 32)):  # a 200-frame stream's later windows
            codes = torch.randint(config.codec.residual_codebook_size, (1, config.num_codebooks, n), generator=gen)
            codes, keep = codes.to(device), max(0, skip - context)
            want, got = codec(codes)[:, skip * spf:], codec(codes, keep)[:, (skip - keep) * spf:]
            torch.testing.assert_close(got, want, atol=tolerances(config).stream_max_abs, rtol=0)
            print(f"\n{n}-frame window, {skip} frames of context: {_ms_per_call(codec, codes):.3f} ms whole, "
                  f"{_ms_per_call(lambda c: codec(c, keep), codes):.3f} ms from frame {keep}")
