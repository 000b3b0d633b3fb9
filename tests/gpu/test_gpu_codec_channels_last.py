"""codec_channels_last on CUDA at full codec size, on the inductor-compiled graphed codec with timed cuDNN algorithms
(codec_conv_autotune, which it requires): each of a stream's window lengths gives the 1-D codec's waveform (within
the target's waveform gate), and the two graphs' replay times per window are printed side by side
(scripts/gpu_codec_profile.py shows the kernels; the evaluator judges the speed). The same for
codec_upsample_channels_last on top of it, against codec_channels_last alone."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import tolerances
from test_gpu_inductor_codec import _ms_per_call

from knowledge_base.transforms.codec_channels_last import codec_channels_last
from knowledge_base.transforms.codec_conv_autotune import codec_conv_autotune
from knowledge_base.transforms.codec_upsample_channels_last import codec_upsample_channels_last
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.config import get_config

pytestmark = pytest.mark.gpu
COMPILED = [(cuda_graph_codec, {}), (inductor_codec, {}), (codec_conv_autotune, {})]


@pytest.mark.parametrize("extra", [[], [(codec_upsample_channels_last, {})]], ids=["decoder", "upsample_too"])
def test_channels_last_windows_match_the_1d_codec(load_package, extra):
    config, device = get_config("drama3"), torch.device("cuda")
    weights = init_codec_weights(config.codec, 0, device, torch.bfloat16)
    after = COMPILED + [(codec_channels_last, {})] + extra
    added = after[-1][0].name  # the transform whose windows are timed against the engine without it
    ncw, nhwc = (load_package(steps).codec_graph.GraphedCodec.from_weights(config.codec, weights, device,
                                                                           torch.bfloat16)
                 for steps in (after[:-1], after))
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in (1, 10, 20, 32, 64, 96, 40):  # the targets' windows of a 200-frame stream
            codes = torch.randint(config.codec.residual_codebook_size, (1, config.num_codebooks, n), generator=gen)
            codes = codes.to(device)
            want, got = ncw(codes), nhwc(codes)
            torch.testing.assert_close(got, want, atol=tolerances(config).waveform_max_abs, rtol=0)
            print(f"\n{n}-frame window: {_ms_per_call(ncw, codes):.3f} ms before, {_ms_per_call(nhwc, codes):.3f} ms "
                  f"with {added}")
