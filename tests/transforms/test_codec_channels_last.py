"""codec_channels_last on CPU: the decoder's convolutions become 2-D over channels-last (B, C, 1, T) tensors with
(out, in, 1, k) channels-last weights, and the codec decodes what the reference codec decodes (float32, to
rounding). Whether cuDNN then skips its layout conversions is the GPU's to show (scripts/gpu_codec_profile.py
--plus codec_channels_last)."""
from __future__ import annotations

import importlib

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_channels_last import codec_channels_last
from reference_runtime.codec_weights import init_codec_weights
from reference_runtime.config import get_config
from reference_runtime.model.codec import Codec

from test_cuda_graphs import REFERENCE, load, transformed

CFG = get_config("drama3-tiny")


def test_applies_once():
    files = transformed(engine_files(REFERENCE), [codec_channels_last])
    with pytest.raises(NotApplicable):
        codec_channels_last.apply(files, {})


def test_decodes_what_the_reference_codec_decodes(tmp_path):
    pkg = load(transformed(engine_files(REFERENCE), [codec_channels_last]), tmp_path)
    weights = init_codec_weights(CFG.codec, 0, "cpu", torch.float32)
    codec = importlib.import_module(f"{pkg.__name__}.codec").Codec.from_weights(CFG.codec, weights, "cpu",
                                                                                  torch.float32)
    conv = codec.decoder.blocks[0].res_units[0].conv1.weight
    assert conv.dim() == 4 and conv.is_contiguous(memory_format=torch.channels_last)
    assert_decodes_as_the_reference(codec, weights)


def assert_decodes_as_the_reference(codec: Codec, weights) -> None:
    """`codec` (built from `weights`, float32, CPU) decodes 7 seeded frames as the reference codec does."""
    reference = Codec.from_weights(CFG.codec, weights, "cpu", torch.float32)
    codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, 7),
                          generator=torch.Generator().manual_seed(0))
    got, want = codec.decode(codes), reference.decode(codes)
    assert got.shape == want.shape == (7 * CFG.codec.frame_samples,)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
