"""codec_first_window_queued on CUDA at drama3-mid: the first chunk (and the rest of a 64-frame stream) equals
codec_overlap's, frames exactly and audio within the waveform gate; the first chunk's time both ways is printed
(medians of 9, the engines alternating; run with -s), for the time to first audio it should shorten."""
from __future__ import annotations

import statistics
import time

import pytest
import torch
from gpu_engines import mid_engines
from test_gpu_codec_overlap import OVERLAPPED, _assert_same_chunks

from knowledge_base.transforms.codec_first_window_queued import codec_first_window_queued
from reference_runtime.api import StreamSchedule, TTSRequest

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
    config, _, overlapped, queued = mid_engines(load_package, OVERLAPPED,
                                                [*OVERLAPPED, (codec_first_window_queued, {})])
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
