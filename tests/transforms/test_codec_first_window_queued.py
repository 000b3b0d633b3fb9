"""codec_first_window_queued on CPU at drama3-tiny: it applies once, on top of codec_overlap; streams give the
overlapped engine's chunks (same boundaries, frames and audio), and the first window goes through the side
stream's helper instead of decode_audio. Whether it starts sooner is the GPU's question:
tests/gpu/test_gpu_codec_first_window_queued.py."""
from __future__ import annotations

import pytest
from test_codec_overlap import OVERLAPPED, SCHEDULES, _assert_same_chunks, overlapped_engines
from test_cuda_graphs import CFG, GREEDY, assert_applies_once_on_top_of

from knowledge_base.transforms.codec_first_window_queued import codec_first_window_queued
from reference_runtime.api import TTSRequest


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    return overlapped_engines(tmp_path_factory.mktemp("first_window"), [codec_first_window_queued])


def test_applies_once_on_top_of_codec_overlap():
    assert_applies_once_on_top_of(codec_first_window_queued, OVERLAPPED)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=("seed", "overlapping"))
def test_streams_give_the_overlapped_engines_chunks(engines, schedule, monkeypatch):
    overlapped, queued = engines
    request = TTSRequest(text="Hello there", max_frames=24, ignore_eos=True, sampling=GREEDY, seed=0)
    want = list(overlapped.stream(request, schedule))
    calls: list[int] = []
    decode = queued.decode_audio
    monkeypatch.setattr(queued, "decode_audio", lambda codes: calls.append(codes.shape[1]) or decode(codes))
    stream = queued.stream(request, schedule)
    got = [next(stream)]
    assert calls == []  # the first window went through the side stream's helper, not decode_audio
    got += list(stream)
    _assert_same_chunks(want, got)
    assert got[0].frame_end == schedule.first_chunk_frames and got[0].audio.numel() > 0


def test_an_out_of_range_first_window_is_reported(engines, monkeypatch):
    """The range check moves from before the decode to the audio's handover: it still stops the stream."""
    _, queued = engines
    blocks = type(queued)._blocks

    def corrupted(self, request, boundaries):
        for block in blocks(self, request, boundaries):
            block = block.clone()
            block[:, 4] = CFG.codec.residual_codebook_size  # one past the last code
            yield block

    monkeypatch.setattr(type(queued), "_blocks", corrupted)
    request = TTSRequest(text="Hello there", max_frames=4, ignore_eos=True, sampling=GREEDY, seed=0)
    with pytest.raises(ValueError, match="out of range in frames 0..1"):
        next(queued.stream(request, SCHEDULES[0]))
