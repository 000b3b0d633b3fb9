"""codec_green_context on CPU at drama3-tiny: it applies once on top of codec_overlap, refuses an SM count off the
partition granularity, and leaves the CPU stream (no side stream) giving codec_overlap's chunks. The partition
itself is a CUDA driver feature: tests/gpu/test_gpu_codec_green_context.py."""
from __future__ import annotations

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_green_context import codec_green_context
from knowledge_base.transforms.codec_overlap import codec_overlap
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed

OVERLAP = [cuda_graph_frame, cuda_graph_codec, codec_overlap]


def test_applies_once_after_codec_overlap():
    assert_applies_once_on_top_of(codec_green_context, OVERLAP)
    with pytest.raises(NotApplicable):  # the stream it partitions is codec_overlap's
        codec_green_context.apply(transformed(engine_files(REFERENCE), OVERLAP[:2]), {"side_sms": 32})


@pytest.mark.parametrize("sms", [0, 12])
def test_an_sm_count_off_the_granularity_is_refused(sms):
    with pytest.raises(ValueError, match="multiple of 8"):
        codec_green_context.apply(transformed(engine_files(REFERENCE), OVERLAP), {"side_sms": sms})


def test_the_cpu_stream_is_codec_overlaps(tmp_path):
    overlap = transformed(engine_files(REFERENCE), OVERLAP)
    weights = init_weights(CFG, seed=0, device="cpu")
    engines = [load(files, tmp_path).build_engine(CFG, weights, "cpu")
               for files in (overlap, transformed(overlap, [codec_green_context]))]
    request = TTSRequest(text="Hello there", max_frames=12, ignore_eos=True, sampling=GREEDY, seed=0)
    schedule = StreamSchedule(first_chunk_frames=2, window_ends=(5,), window_stride=3, overlap_frames=2)
    want, got = (list(engine.stream(request, schedule)) for engine in engines)
    assert engines[1]._beside._green is None
    assert [(c.frame_start, c.frame_end) for c in got] == [(c.frame_start, c.frame_end) for c in want]
    for g, w in zip(got, want):
        assert torch.equal(g.frames, w.frames)
        torch.testing.assert_close(g.audio, w.audio, atol=0, rtol=0)
