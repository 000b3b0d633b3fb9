"""codec_upsample_channels_last on CPU: on top of codec_channels_last, the upsampling stages run on channels-last
(B, C, 1, T) tensors from the post-module's output on (no copy before the decoder's first convolution), their
convolutions' weights are (out, in, 1, k) channels-last, and the codec decodes what the reference codec decodes
(float32, to rounding). Whether cuDNN's layout conversions go is the GPU's to show
(tests/gpu/test_gpu_codec_channels_last.py prints the windows' times)."""
from __future__ import annotations

import functools
import importlib

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_channels_last import codec_channels_last
from knowledge_base.transforms.codec_upsample_channels_last import codec_upsample_channels_last
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.inductor_codec import inductor_codec
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.model.codec import Codec

from test_codec_channels_last import CFG, assert_decodes_as_the_reference
from test_cuda_graphs import REFERENCE, load, transformed

STACK = [codec_channels_last, codec_upsample_channels_last]


def test_applies_once_and_only_on_the_channels_last_decoder():
    files = engine_files(REFERENCE)
    with pytest.raises(NotApplicable):
        codec_upsample_channels_last.apply(files, {})
    with pytest.raises(NotApplicable):
        codec_upsample_channels_last.apply(transformed(files, STACK), {})


def test_decodes_what_the_reference_codec_decodes_on_channels_last_tensors(tmp_path):
    pkg = load(transformed(engine_files(REFERENCE), STACK), tmp_path)
    weights = init_codec_weights(CFG.codec, 0, "cpu", torch.float32)
    codec = importlib.import_module(f"{pkg.__name__}.codec").Codec.from_weights(CFG.codec, weights, "cpu",
                                                                                  torch.float32)
    for conv in (codec.upsample[0].conv.weight, codec.upsample[1].convnext.dwconv.weight):
        assert conv.dim() == 4 and conv.is_contiguous(memory_format=torch.channels_last)
    entering = []
    codec.decoder.conv_in.register_forward_pre_hook(lambda module, args: entering.append(args[0]))
    assert_decodes_as_the_reference(codec, weights)
    (x,) = entering
    assert x.dim() == 4 and x.shape[2] == 1 and x.is_contiguous(memory_format=torch.channels_last)


def test_the_compiled_codec_traces_it_whole(tmp_path, monkeypatch):
    """As inductor_codec compiles it (fullgraph: a graph break fails), on the engines' graphed codec."""
    pkg = load(transformed(engine_files(REFERENCE), [cuda_graph_codec, inductor_codec, *STACK]), tmp_path)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager", fullgraph=True))
    torch._dynamo.reset()
    weights = init_codec_weights(CFG.codec, 0, "cpu", torch.float32)
    codec = pkg.codec_graph.GraphedCodec.from_weights(CFG.codec, weights, "cpu", torch.float32)
    codes = torch.randint(CFG.codec.residual_codebook_size, (1, CFG.num_codebooks, 5),
                          generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        want = Codec.from_weights(CFG.codec, weights, "cpu", torch.float32)(codes)
        torch.testing.assert_close(codec._compiled(codes), want, atol=1e-5, rtol=1e-4)
