"""codec_one_frame_attention on CUDA at full codec size, on the kept lineage's codec (graphed, inductor-compiled,
timed cuDNN algorithms, channels-last, trimmed context): the one-frame window (a stream's first chunk) gives the
full attention's waveform within the target's waveform gate, and both graphs' replay times are printed side by side
(run with -s)."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import tolerances
from test_gpu_codec_context_trim import STACK
from test_gpu_inductor_codec import _ms_per_call

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.config import get_config

pytestmark = pytest.mark.gpu


def test_one_frame_window_matches_the_full_attention(load_package):
    config, device = get_config("drama3"), torch.device("cuda")
    weights = init_codec_weights(config.codec, 0, device, torch.bfloat16)
    codecs = [load_package([(TRANSFORMS[n], {}) for n in stack]).codec_graph.GraphedCodec.from_weights(
        config.codec, weights, device, torch.bfloat16) for stack in (STACK, [*STACK, "codec_one_frame_attention"])]
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(config.codec.residual_codebook_size, (1, config.num_codebooks, 1), generator=gen).to(device)
    with torch.inference_mode():
        full, short = (codec(codes) for codec in codecs)
        torch.testing.assert_close(short, full, atol=tolerances(config).waveform_max_abs, rtol=0)
        print(f"\n1-frame window: {_ms_per_call(codecs[0], codes):.3f} ms with the attention, "
              f"{_ms_per_call(codecs[1], codes):.3f} ms as its value path")
