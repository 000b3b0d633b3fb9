"""codec_windows_ahead on CPU at drama3-tiny: it applies once, on top of codec_overlap (and with
codec_first_window_queued); streams give codec_overlap's chunks in the same order, and at each boundary the new
window is queued before the previous one is waited for. The GPU's idle time is scripts/stream_idle.py's to show."""
from __future__ import annotations

import pytest
from test_codec_overlap import OVERLAPPED, SCHEDULES, _assert_same_chunks, overlapped_engines
from test_cuda_graphs import GREEDY, assert_applies_once_on_top_of

from knowledge_base.transforms.codec_first_window_queued import codec_first_window_queued
from knowledge_base.transforms.codec_windows_ahead import codec_windows_ahead
from reference_runtime.api import TTSRequest


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return overlapped_engines(tmp_path_factory.mktemp("ahead"), [codec_windows_ahead],
                              [codec_first_window_queued, codec_windows_ahead])


def test_applies_once_on_top_of_codec_overlap():
    assert_applies_once_on_top_of(codec_windows_ahead, OVERLAPPED)
    assert_applies_once_on_top_of(codec_windows_ahead, [*OVERLAPPED, codec_first_window_queued])


@pytest.mark.parametrize("schedule", SCHEDULES, ids=("seed", "overlapping"))
def test_streams_give_the_same_chunks_with_each_window_queued_before_the_last_is_waited_for(engines, schedule,
                                                                                             monkeypatch):
    overlapped, *ahead = engines
    request = TTSRequest(text="Hello there", max_frames=24, ignore_eos=True, sampling=GREEDY, seed=0)
    want = list(overlapped.stream(request, schedule))
    for engine in ahead:
        events: list[tuple[str, int]] = []
        beside = engine._beside
        start, finish = beside.start, beside.finish
        monkeypatch.setattr(beside, "start", lambda *a: events.append(("queued", a[3])) or start(*a))
        monkeypatch.setattr(beside, "finish", lambda w, n: events.append(("waited", w.end)) or finish(w, n))
        _assert_same_chunks(want, list(engine.stream(request, schedule)))
        later = [e for e in events if e[1] > schedule.first_chunk_frames]  # the windows codec_overlap queues
        ends = [end for what, end in later if what == "queued"]
        assert len(ends) >= 2 and ends == [end for what, end in later if what == "waited"]
        for previous, end in zip(ends, ends[1:]):  # window `end` queued before window `previous` is waited for
            assert later.index(("queued", end)) < later.index(("waited", previous))
