"""codec_overlap on CPU at drama3-tiny: streams give the graphed engine's chunks (same boundaries, frames and audio),
with and without an EOS part-way, and an out-of-range code is reported, not decoded. The overlap itself (a side
CUDA stream) is timed on the GPU: tests/gpu/test_gpu_codec_overlap.py."""
from __future__ import annotations

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_overlap import codec_overlap
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed

SCHEDULES = (StreamSchedule(first_chunk_frames=1), StreamSchedule(first_chunk_frames=2, window_ends=(5,),
                                                                   window_stride=3, overlap_frames=2))


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap")
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame, cuda_graph_codec])
    weights = init_weights(CFG, seed=0, device="cpu")
    return (load(graph, root).build_engine(CFG, weights, "cpu"),
            load(transformed(graph, [codec_overlap]), root).build_engine(CFG, weights, "cpu"))


def test_applies_once_after_the_graphed_frame_and_codec():
    assert_applies_once_on_top_of(codec_overlap, [cuda_graph_frame, cuda_graph_codec])
    with pytest.raises(NotApplicable):  # the stream it rewrites is the graphed engine's
        codec_overlap.apply(engine_files(REFERENCE), {})


def _assert_same_chunks(want, got) -> None:
    assert [(c.frame_start, c.frame_end) for c in got] == [(c.frame_start, c.frame_end) for c in want]
    for g, w in zip(got, want):
        assert torch.equal(g.frames, w.frames)
        torch.testing.assert_close(g.audio, w.audio, atol=0, rtol=0)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=("seed", "overlapping"))
def test_streams_give_the_graphed_engines_chunks(engines, schedule):
    graphed, overlapped = engines
    request = TTSRequest(text="Hello there", max_frames=24, ignore_eos=True, sampling=GREEDY, seed=0)
    _assert_same_chunks(list(graphed.stream(request, schedule)), list(overlapped.stream(request, schedule)))
    assert overlapped._beside is not None  # the windows after the first went through it


def _stopping_after(frames: int, blocks):
    """GraphEngine._blocks cut after `frames` frames, as an EOS there would cut it, whatever the weights draw."""
    def stopping(self, request, boundaries):
        made = 0
        for block in blocks(self, request, boundaries):
            if made + len(block) >= frames:
                yield block[:frames - made]
                return
            made += len(block)
            yield block
    return stopping


def test_a_stream_cut_short_by_eos_gives_the_same_chunks(engines, monkeypatch):
    request = TTSRequest(text="Hello there", max_frames=24, sampling=GREEDY, seed=0)
    streams = []
    for engine in engines:
        monkeypatch.setattr(type(engine), "_blocks", _stopping_after(13, type(engine)._blocks))
        streams.append(list(engine.stream(request, SCHEDULES[0])))
    assert streams[0][-1].frame_end == 13
    _assert_same_chunks(*streams)


def test_an_out_of_range_code_is_reported(engines):
    _, overlapped = engines
    frames = [torch.zeros(11, dtype=torch.long) for _ in range(3)]
    frames[1][4] = CFG.codec.residual_codebook_size  # one past the last code
    queued = overlapped._queue(frames, 1, 3, None)
    with pytest.raises(ValueError, match="out of range in frames 1..3"):
        overlapped._beside.finish(queued, CFG.codec.frame_samples)
