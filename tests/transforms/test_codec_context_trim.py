"""codec_context_trim on CPU at drama3-tiny: it applies once, on top of codec_overlap and inductor_codec; a codec
window with its convolutions started context_frames before the emitted frames gives the whole window's samples
there (and a shorter context does not, so the reach is not overstated for nothing); the compiled codec traces
whole with each trim; and streams whose windows re-decode more left context than that give the untrimmed engine's
chunks. The side stream and the graphs are the GPU's: tests/gpu/test_gpu_codec_context_trim.py."""
from __future__ import annotations

import functools
import importlib

import pytest
import torch
from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms.codec_context_trim import codec_context_trim
from knowledge_base.transforms.codec_overlap import codec_overlap
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.weights import init_weights

STACK = [cuda_graph_frame, cuda_graph_codec, codec_overlap, inductor_codec]
# windows [0, 1), [0, 5), [0, 20), [4, 32), [16, 44): the last two re-decode 16 frames, more than the reach (11)
SCHEDULE = StreamSchedule(first_chunk_frames=1, window_ends=(5, 20), window_stride=12, overlap_frames=16)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("trim")
    base = transformed(engine_files(REFERENCE), STACK)
    return load(base, root), load(transformed(base, [codec_context_trim]), root)


def test_applies_once_on_top_of_the_overlapped_inductor_codec():
    assert_applies_once_on_top_of(codec_context_trim, STACK)


def test_the_trimmed_convolutions_give_the_whole_windows_samples(packages):
    trimmed = packages[1]
    context = importlib.import_module(f"{trimmed.__name__}.codec_context").context_frames(CFG.codec)
    codec = trimmed.codec.Codec.from_weights(CFG.codec, init_codec_weights(CFG.codec, 0, "cpu", torch.float32), "cpu",
                                             torch.float32)
    spf, n, skip = CFG.codec.frame_samples, 30, 20
    codes = torch.randint(CFG.codec.residual_codebook_size, (1, CFG.num_codebooks, n),
                          generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        whole = codec(codes)[:, skip * spf:]
        for reach, exact in ((context, True), (2, False)):
            keep = skip - reach
            got = codec(codes, keep)
            assert got.shape == (1, (n - keep) * spf)
            error = (got[:, (skip - keep) * spf:] - whole).abs().max().item()
            assert (error < 1e-5) == exact, (reach, error)


def test_the_compiled_codec_traces_whole_with_each_trim(packages, monkeypatch):
    """inductor_codec's compile with the trim: dynamo traces the codec whole (fullgraph) as `keep` goes from a
    constant to a dynamic value with the window length, and matches the eager codec (aot_eager: no code generation
    here; the graphs and inductor's kernels are the GPU test's)."""
    trimmed = packages[1]
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager", fullgraph=True))
    torch._dynamo.reset()
    codec = trimmed.codec_graph.GraphedCodec.from_weights(
        CFG.codec, init_codec_weights(CFG.codec, 0, "cpu", torch.float32), "cpu", torch.float32)
    gen = torch.Generator().manual_seed(2)
    with torch.inference_mode():
        for n, keep in ((1, 0), (5, 0), (28, 5), (40, 21), (33, 9)):
            codes = torch.randint(CFG.codec.residual_codebook_size, (1, CFG.num_codebooks, n), generator=gen)
            torch.testing.assert_close(codec._compiled(codes, keep), trimmed.codec.Codec.forward(codec, codes, keep),
                                       atol=1e-5, rtol=1e-5)


def test_streams_give_the_untrimmed_engines_chunks(packages):
    weights = init_weights(CFG, seed=0, device="cpu")
    plain, trimmed = (pkg.build_engine(CFG, weights, "cpu") for pkg in packages)
    request = TTSRequest(text="Hello there", max_frames=44, ignore_eos=True, sampling=GREEDY, seed=0)
    want, got = list(plain.stream(request, SCHEDULE)), list(trimmed.stream(request, SCHEDULE))
    assert [(c.frame_start, c.frame_end) for c in got] == [(c.frame_start, c.frame_end) for c in want] == \
        [(0, 1), (1, 5), (5, 20), (20, 32), (32, 44)]
    for g, w in zip(got, want):
        assert torch.equal(g.frames, w.frames)
        torch.testing.assert_close(g.audio, w.audio, atol=1e-5, rtol=0)
