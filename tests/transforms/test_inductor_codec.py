"""inductor_codec on CPU at drama3-tiny: it applies once, after cuda_graph_codec, and the codec traces whole
through dynamo (fullgraph) at a static and then a dynamic window length, giving the eager codec's waveform. The
compile runs here with the aot_eager backend (no code generation, so the CPU suite stays fast); inductor's
kernels and the graphs they are captured in are checked on the GPU (tests/gpu/test_gpu_inductor_codec.py)."""
from __future__ import annotations

import functools

import torch
from test_cuda_graphs import CFG, REFERENCE, assert_applies_once_on_top_of, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.codec_weights import init_codec_weights


def test_applies_once_after_the_graphed_codec():
    assert_applies_once_on_top_of(inductor_codec, [cuda_graph_codec])


def test_the_codec_traces_whole_and_matches_eager(tmp_path, monkeypatch):
    pkg = load(transformed(engine_files(REFERENCE), [cuda_graph_codec, inductor_codec]), tmp_path)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager", fullgraph=True))
    torch._dynamo.reset()
    weights = init_codec_weights(CFG.codec, 0, "cpu", torch.float32)
    codec = pkg.codec_graph.GraphedCodec.from_weights(CFG.codec, weights, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in (1, 5, 12):  # a static compile, then a dynamic one that 12 reuses
            codes = torch.randint(CFG.codec.residual_codebook_size, (1, CFG.num_codebooks, n), generator=gen)
            want = pkg.codec.Codec.forward(codec, codes)
            torch.testing.assert_close(codec._compiled(codes), want, atol=1e-5, rtol=1e-5)
    assert want.shape == (1, 12 * CFG.codec.frame_samples)
