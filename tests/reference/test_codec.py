"""Codec decoder: weight table, seeded init, output shape/range, causality, prefix decode, speed."""
from __future__ import annotations

import math
import time

import pytest
import torch

from reference_runtime.codec_weights import codec_weight_shapes, init_codec_weights
from reference_runtime.config import CodecConfig, get_config
from reference_runtime.model.codec import Codec

TINY = get_config("drama3-tiny").codec
FRAME = TINY.frame_samples


def random_codes(frames: int, seed: int = 0, c: CodecConfig = TINY) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    semantic = torch.randint(0, c.semantic_codebook_size, (1, frames), generator=g)
    residual = torch.randint(0, c.residual_codebook_size, (c.residual_codebooks, frames), generator=g)
    return torch.cat([semantic, residual])


def build(seed: int = 0) -> Codec:
    return Codec.from_weights(TINY, init_codec_weights(TINY, seed, "cpu", torch.float32), "cpu", torch.float32)


@pytest.fixture(scope="module")
def codec() -> Codec:
    return build()


@pytest.fixture(scope="module")
def codes() -> torch.Tensor:
    return random_codes(40)  # longer than the 16-frame attention window


@pytest.fixture(scope="module")
def audio(codec, codes) -> torch.Tensor:
    return codec.decode(codes)


@pytest.mark.parametrize("name", ["drama3-tiny", "drama3"])
def test_weight_table_is_the_module_parameters(name):
    c = get_config(name).codec
    with torch.device("meta"):
        module = Codec(c)
    table = {name: spec.shape for name, spec in codec_weight_shapes(c).items()}
    assert {f"codec.{k}": tuple(t.shape) for k, t in module.state_dict().items()} == table


def test_full_codec_has_the_published_parameter_counts():
    # vLLM-Omni PR #2430: decoder 54.1M, post_module 109.1M, upsample 21.0M, codebooks ~0.3M (drama3_arch §1d)
    counts: dict[str, int] = {}
    for name, spec in codec_weight_shapes(get_config("drama3").codec).items():
        group = name.split(".")[1]
        counts[group] = counts.get(group, 0) + math.prod(spec.shape)
    assert counts["decoder"] == pytest.approx(54.1e6, rel=0.02)
    assert counts["post_module"] == pytest.approx(109.1e6, rel=0.02)
    assert counts["upsample"] == pytest.approx(21.0e6, rel=0.02)
    assert counts["quantizer"] < 0.3e6


def test_init_is_seeded_per_name():
    a, b = init_codec_weights(TINY, 0, "cpu", torch.float32), init_codec_weights(TINY, 0, "cpu", torch.float32)
    other = init_codec_weights(TINY, 1, "cpu", torch.float32)
    assert all(name.startswith("codec.") and t.dtype == torch.float32 for name, t in a.items())
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not any(torch.equal(a[name], other[name]) for name in a)
    book = "codec.quantizer.residual.{}.codebook.weight"
    assert not torch.equal(a[book.format(0)], a[book.format(1)])


def test_output_shape_dtype_and_range(audio, codes):
    assert audio.shape == (codes.shape[1] * FRAME,) and audio.dtype == torch.float32 and audio.device.type == "cpu"
    assert torch.isfinite(audio).all() and audio.abs().max() <= 1


def test_audio_is_loud_but_rarely_clipped(audio):
    assert audio.pow(2).mean().sqrt() > 0.05
    assert (audio.abs() > 0.99).float().mean() < 0.01
    frame_rms = audio.view(-1, FRAME).pow(2).mean(1).sqrt()
    assert frame_rms.min() > 0.01  # no silent frame


def test_decode_is_deterministic_and_depends_on_the_weights(codec, codes, audio):
    assert torch.equal(codec.decode(codes), audio)
    assert not torch.allclose(build(seed=1).decode(codes), audio, atol=1e-3)


@pytest.mark.parametrize("k", [0, 17, 39])
def test_changing_frame_k_leaves_earlier_samples_unchanged(codec, codes, audio, k):
    changed = codes.clone()
    changed[0, k] = (changed[0, k] + 1) % TINY.semantic_codebook_size
    changed[1:, k] = (changed[1:, k] + 1) % TINY.residual_codebook_size
    out = codec.decode(changed)
    torch.testing.assert_close(out[:k * FRAME], audio[:k * FRAME], atol=1e-6, rtol=0)
    assert (out[k * FRAME:(k + 1) * FRAME] - audio[k * FRAME:(k + 1) * FRAME]).abs().max() > 1e-3


@pytest.mark.parametrize("frames", [1, 7, 16, 17, 33])
def test_prefix_decode_equals_prefix_of_full_decode(codec, codes, audio, frames):
    torch.testing.assert_close(codec.decode(codes[:, :frames]), audio[:frames * FRAME], atol=1e-5, rtol=0)


def test_zero_frames_decode_to_no_audio(codec):
    assert codec.decode(random_codes(0)).shape == (0,)


@pytest.mark.parametrize("row, value, message", [
    (0, 64, r"codebook 0 needs \[0, 64\)"),
    (5, 32, r"codebooks 1\.\. need \[0, 32\)"),
    (3, -1, r"out of range"),
])
def test_out_of_range_codes_are_rejected(codec, row, value, message):
    codes = random_codes(3)
    codes[row, 2] = value
    with pytest.raises(ValueError, match=message):
        codec.decode(codes)


def test_wrong_code_shape_is_rejected(codec):
    with pytest.raises(ValueError, match=r"must be \(10, frames\), got \(9, 3\)"):
        codec.decode(random_codes(3)[:9])


def test_from_weights_names_missing_and_misshapen_tensors():
    weights = init_codec_weights(TINY, 0, "cpu", torch.float32)
    missing = dict(weights)
    del missing["codec.decoder.conv_out.bias"]
    with pytest.raises(ValueError, match=r"missing \['decoder.conv_out.bias'\]"):
        Codec.from_weights(TINY, missing, "cpu", torch.float32)
    with pytest.raises(ValueError, match=r"missing \[.*unexpected \["):
        Codec.from_weights(get_config("drama3").codec, weights | {"codec.extra": torch.zeros(1)}, "cpu", torch.float32)
    misshapen = weights | {"codec.decoder.conv_out.bias": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"codec.decoder.conv_out.bias has shape \(2,\), expected \(1,\)"):
        Codec.from_weights(TINY, misshapen, "cpu", torch.float32)


def test_tiny_codec_decodes_200_frames_fast(codec):
    long_codes = random_codes(200)
    codec.decode(long_codes[:, :10])  # warm up
    best = float("inf")
    for _ in range(2):  # best of two: the CI machine is shared
        start = time.perf_counter()
        codec.decode(long_codes)
        best = min(best, time.perf_counter() - start)
    assert best < 3.0, f"200 frames took {best:.2f} s"


@pytest.mark.gpu
def test_full_codec_on_cuda():
    c = get_config("drama3").codec
    codec = Codec.from_weights(c, init_codec_weights(c, 0, "cuda", torch.bfloat16), "cuda", torch.bfloat16)
    audio = codec.decode(random_codes(10, c=c))
    assert audio.shape == (10 * FRAME,) and audio.dtype == torch.float32 and torch.isfinite(audio).all()
    assert audio.pow(2).mean().sqrt() > 0.05 and (audio.abs() > 0.99).float().mean() < 0.01
