"""codec_windows_ahead on CUDA at drama3-mid: a 200-frame stream under the targets' schedule (32 frames of left
context) gives codec_overlap's chunks, frames exactly and audio within the waveform gate; both streams' wall times
are printed (medians of 5, alternating; run with -s). scripts/stream_idle.py shows the idle gaps it should close."""
from __future__ import annotations

import statistics

import pytest
from gpu_engines import mid_engines
from test_gpu_codec_overlap import OVERLAPPED, _assert_same_chunks, _timed_stream

from knowledge_base.transforms.codec_windows_ahead import codec_windows_ahead
from reference_runtime.api import StreamSchedule, TTSRequest

pytestmark = pytest.mark.gpu


def test_windows_ahead_give_the_same_chunks_and_are_timed(load_package):
    config, _, waiting, ahead = mid_engines(load_package, OVERLAPPED, [*OVERLAPPED, (codec_windows_ahead, {})])
    engines = {"waiting first": waiting, "queued first": ahead}
    request = TTSRequest(text="Hello there, this is a streamed test.", max_frames=200, ignore_eos=True, seed=5)
    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=32)
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    chunks = {}
    for trial in range(6):  # the first captures the graphs
        for name, engine in engines.items():
            chunks[name], s = _timed_stream(engine, request, schedule)
            if trial:
                seconds[name].append(s)
    _assert_same_chunks(config, chunks["queued first"], chunks["waiting first"])
    ms = {name: statistics.median(v) * 1e3 for name, v in seconds.items()}
    print(f"\ndrama3-mid 200-frame stream: {ms['waiting first']:.1f} ms waiting for each window first, "
          f"{ms['queued first']:.1f} ms queuing the next one first ({ms['waiting first'] / ms['queued first']:.3f}x)")
