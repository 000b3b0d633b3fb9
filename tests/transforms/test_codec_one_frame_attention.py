"""codec_one_frame_attention on CPU at drama3-tiny: it applies once to any engine package; a one-frame codec window
gives the reference codec's waveform without running the attention kernel, and longer windows still run it and
give the reference's waveform exactly."""
from __future__ import annotations

import pytest
import torch
from test_cuda_graphs import CFG, REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_one_frame_attention import codec_one_frame_attention
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    weights = init_weights(CFG, seed=0, device="cpu")
    package = load(transformed(engine_files(REFERENCE), [codec_one_frame_attention]), tmp_path_factory.mktemp("one"))
    return build_engine(CFG, weights, "cpu"), package.build_engine(CFG, weights, "cpu"), package


def _codes(frames: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(frames)
    return torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, frames), generator=gen)


def test_applies_once():
    files = transformed(engine_files(REFERENCE), [codec_one_frame_attention])
    with pytest.raises(NotApplicable):
        codec_one_frame_attention.apply(files, {})


def test_one_frame_is_the_value_path_and_longer_windows_attend(engines, monkeypatch):
    reference, engine, package = engines
    one = _codes(1)
    want = reference.decode_audio(one)

    def no_attention(*args, **kwargs):
        raise AssertionError("the attention kernel ran")

    monkeypatch.setattr(package.codec.F, "scaled_dot_product_attention", no_attention)
    torch.testing.assert_close(engine.decode_audio(one), want, atol=1e-6, rtol=0)
    with pytest.raises(AssertionError, match="attention kernel ran"):
        engine.decode_audio(_codes(2))
    monkeypatch.undo()
    for frames in (2, 7):
        assert torch.equal(engine.decode_audio(_codes(frames)), reference.decode_audio(_codes(frames)))
