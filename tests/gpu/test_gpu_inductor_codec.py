"""inductor_codec on CUDA at full codec size: each window length's graph of the inductor-compiled codec gives the
graphed eager codec's waveform (within the target's waveform gate), and the two graphs' replay times per window
are printed side by side (the evaluator judges the speed)."""
from __future__ import annotations

import time

import pytest
import torch
from gpu_engines import tolerances

from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.config import get_config

pytestmark = pytest.mark.gpu


def _ms_per_call(codec, codes: torch.Tensor, calls: int = 20) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        codec(codes)
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3 / calls


def test_compiled_windows_match_the_graphed_codec(load_package):
    config, device = get_config("drama3"), torch.device("cuda")
    weights = init_codec_weights(config.codec, 0, device, torch.bfloat16)
    graphed, compiled = (load_package(steps).codec_graph.GraphedCodec.from_weights(config.codec, weights, device,
                                                                                   torch.bfloat16)
                         for steps in ([(cuda_graph_codec, {})], [(cuda_graph_codec, {}), (inductor_codec, {})]))
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in (1, 10, 20, 32, 64):
            codes = torch.randint(config.codec.residual_codebook_size, (1, config.num_codebooks, n), generator=gen)
            codes = codes.to(device)
            want, got = graphed(codes), compiled(codes)
            torch.testing.assert_close(got, want, atol=tolerances(config).waveform_max_abs, rtol=0)
            print(f"\n{n}-frame window: {_ms_per_call(graphed, codes):.3f} ms graphed eager, "
                  f"{_ms_per_call(compiled, codes):.3f} ms graphed inductor")
