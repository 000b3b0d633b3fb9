"""codec_green_context on CUDA: the partition is real (a codec window on an 8-SM green stream takes longer than on
the whole GPU), and a drama3-mid stream with the seed's windows gives codec_overlap's chunks; both streams' wall
times are printed side by side (the evaluator judges the speed)."""
from __future__ import annotations

import statistics
import time

import pytest
import torch
from gpu_engines import assert_same_chunks, config_named

from knowledge_base.transforms.codec_green_context import codec_green_context
from knowledge_base.transforms.codec_overlap import codec_overlap
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
OVERLAP = [(cuda_graph_frame, {}), (cuda_graph_codec, {}), (codec_overlap, {})]


def _wall_ms(run) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1e3


def test_the_partition_bounds_the_codecs_sms(load_package):
    config, device = config_named("drama3-mid"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    engine = load_package(OVERLAP + [(codec_green_context, {"side_sms": 8})]).build_engine(config, weights, device)
    window = torch.zeros((64, 11), dtype=torch.long, device=device)
    beside = engine._beside

    def whole_gpu():
        engine.decode_audio(window[:, 1:].T)

    def green():
        beside.finish(beside.start(window, 0, 0, 64), config.codec.frame_samples)

    times = {run: [] for run in (whole_gpu, green)}
    for _ in range(6):  # the first of each captures the window's graph
        for run in times:
            times[run].append(_wall_ms(run))
    whole_ms, green_ms = (statistics.median(t[1:]) for t in times.values())
    print(f"\n64-frame codec window: {whole_ms:.2f} ms on the whole GPU, {green_ms:.2f} ms on 8 SMs")
    assert green_ms > 1.5 * whole_ms, "the green context did not bound the codec's SMs"


def test_partitioned_stream_gives_codec_overlaps_chunks(load_package):
    config, device = config_named("drama3-mid"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    engines = [load_package(steps).build_engine(config, weights, device)
               for steps in (OVERLAP, OVERLAP + [(codec_green_context, {"side_sms": 32})])]
    request = TTSRequest(text="Hello there, this is a streamed test.", max_frames=200, ignore_eos=True, seed=5)
    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=32)  # the GPU targets' windows
    streams, walls = [[], []], [[], []]
    for _ in range(3):  # the first streams capture the graphs
        for i, engine in enumerate(engines):
            walls[i].append(_wall_ms(lambda: streams[i].append(list(engine.stream(request, schedule)))))
    want_ms, got_ms = (statistics.median(w[1:]) for w in walls)
    print(f"\n200-frame drama3-mid stream: {want_ms:.1f} ms with codec_overlap, {got_ms:.1f} ms with the codec on "
          f"32 SMs ({want_ms / got_ms:.3f}x)")
    assert_same_chunks(config, streams[1][-1], streams[0][-1])
