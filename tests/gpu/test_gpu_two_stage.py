"""The codec on a second GPU (build_engine's codec_device) at drama3-tiny: the reference and the graph engine
(cuda_graph_frame + cuda_graph_codec) stream the same frames and audio with the codec on cuda:1 as on cuda:0,
codes on the generation GPU reach the codec by the peer hand-off, and host codes (the harness's decode_audio)
still decode."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import config_named, tolerances

from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from reference_runtime.api import StreamSchedule
from reference_runtime.bench import bench_requests
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]
GENERATION, CODEC = torch.device("cuda:0"), torch.device("cuda:1")


@pytest.fixture(scope="module", params=["reference", "graph"])
def engines(request, load_package):
    """(config, engine with the codec on the generation GPU, the same engine with the codec on the second GPU)."""
    config = config_named("drama3-tiny")
    weights = init_weights(config, seed=0, device=GENERATION)
    build = build_engine if request.param == "reference" else \
        load_package([(cuda_graph_frame, {}), (cuda_graph_codec, {})]).build_engine
    return config, build(config, weights, GENERATION), build(config, weights, GENERATION, codec_device=CODEC)


def test_the_codec_lives_on_the_second_gpu(engines):
    _, one, two = engines
    assert one.codec_stage.device == GENERATION and two.codec_stage.device == CODEC
    assert {p.device for p in two.codec.parameters()} == {CODEC}


def test_streams_match_the_one_gpu_engine(engines):
    config, one, two = engines
    tol = tolerances(config)
    request = bench_requests(config, 24)["sentences"]
    schedule = StreamSchedule(first_chunk_frames=1)
    a, b = list(one.stream(request, schedule)), list(two.stream(request, schedule))
    assert [c.frame_end for c in a] == [c.frame_end for c in b]
    for x, y in zip(a, b):
        assert torch.equal(x.frames, y.frames) and y.audio.device.type == "cpu"
        torch.testing.assert_close(y.audio, x.audio, atol=tol.stream_max_abs, rtol=0)


def test_peer_and_host_hand_offs_decode_alike(engines):
    config, one, two = engines
    tol = tolerances(config)
    gen = torch.Generator().manual_seed(0)
    for n in (1, 10, 33):
        codes = torch.randint(config.codec.residual_codebook_size, (config.num_codebooks, n), generator=gen)
        want = one.decode_audio(codes)
        for _ in range(2):  # a graphed codec captures on the first call and replays on the second
            torch.testing.assert_close(two.decode_audio(codes), want, atol=tol.waveform_max_abs, rtol=0)
            torch.testing.assert_close(two.codec_stage.decode(codes.to(GENERATION)), want,
                                       atol=tol.waveform_max_abs, rtol=0)
    assert two.codec_stage._stream is not None  # the codes on cuda:0 went by the event-ordered peer copy
