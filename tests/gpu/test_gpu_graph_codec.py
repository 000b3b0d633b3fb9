"""cuda_graph_codec on CUDA: graph-replayed decodes of padded window lengths equal the eager codec's, for lengths
on and off the ladder, and lengths over max_graph_frames fall back to eager decoding."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import config_named, tolerances

from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_graphed_decode_matches_eager(config_name, load_package):
    config, device = config_named(config_name), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    ref = build_engine(config, weights, device)
    eng = load_package([(cuda_graph_codec, {"max_graph_frames": 64})]).build_engine(config, weights, device)
    tol = tolerances(config)
    gen = torch.Generator().manual_seed(0)
    for n in (1, 5, 10, 64, 70):
        codes = torch.randint(config.codec.residual_codebook_size, (config.num_codebooks, n), generator=gen)
        want = ref.decode_audio(codes)
        for _ in range(2):  # the second call replays the captured graph
            torch.testing.assert_close(eng.decode_audio(codes), want, atol=tol.waveform_max_abs, rtol=0)
    assert sorted(eng.codec._graphs) == [1, 6, 12, 64]
