"""codec_first_window_queued on CUDA at drama3-mid: the first chunk (and the rest of a 64-frame stream) equals
codec_overlap's, frames exactly and audio within the waveform gate; the first chunk's time both ways is printed
(medians of 9, the engines alternating; run with -s), for the time to first audio it should shorten."""
from __future__ import annotations

import statistics
import time

import pytest
import torch
from gpu_engines import config_named
from test_gpu_codec_overlap import _assert_same_chunks

from knowledge_base.transforms.codec_first_window_queued import codec_first_window_queued
from knowledge_base.transforms.codec_overlap import codec_overlap
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu


def _first_chunk_ms(engine, request, schedule) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    stream = engine.stream(request, schedule)
    next(stream)
    elapsed = time.perf_counter() - started
    stream.close()
    return elapsed * 1e3


def test_first_window_queued_gives_the_same_chunks_and_is_timed(load_package):
    config, device = config_named("drama3-mid"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    stack = [(cuda_graph_frame, {}), (cuda_graph_codec, {}), (inductor_codec, {}), (codec_overlap, {})]
    overlapped = load_package(stack).build_engine(config, weights, device)
    queued = load_package(stack + [(codec_first_window_queued, {})]).build_engine(config, weights, device)
    request = TTSRequest(text="Hello there, this is a streamed test.", max_frames=64, ignore_eos=True, seed=5)
    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=32)
    for _ in range(2):  # the first streams capture the graphs
        want, got = list(overlapped.stream(request, schedule)), list(queued.stream(request, schedule))
    _assert_same_chunks(config, got, want)
    times: dict[str, list[float]] = {"decode_audio": [], "queued": []}
    for _ in range(9):
        times["decode_audio"].append(_first_chunk_ms(overlapped, request, schedule))
        times["queued"].append(_first_chunk_ms(queued, request, schedule))
    ms = {k: statistics.median(v) for k, v in times.items()}
    print(f"\ndrama3-mid first chunk: {ms['decode_audio']:.2f} ms through decode_audio, {ms['queued']:.2f} ms "
          f"queued behind the prefill ({ms['decode_audio'] / ms['queued']:.3f}x)")
