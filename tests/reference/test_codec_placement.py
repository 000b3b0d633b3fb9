"""Codec placement on CPU: build_engine's codec_device defaults to the generation device, the CodecStage takes
codes from any device, and audio through the stage equals the codec's own decode. The two-GPU hand-off itself is
tested in tests/gpu/test_gpu_two_stage.py (CPU has no streams or events to hand off with)."""
from __future__ import annotations

import pytest
import torch

from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model.codec import Codec
from reference_runtime.model.placement import CodecStage, is_peer_hand_off
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")
REQUEST = TTSRequest(text="Hello there.", max_frames=14, ignore_eos=True, seed=2)
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def weights():
    return init_weights(CFG, seed=0, device="cpu")


def _codes(frames: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(frames)
    return torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, frames), generator=gen)


def test_codec_device_defaults_to_the_generation_device(weights):
    engine = build_engine(CFG, weights, "cpu")
    assert engine.codec_stage.device == engine.device == CPU
    assert {p.device for p in engine.codec.parameters()} == {CPU}


def test_codec_device_given_explicitly_builds_the_same_engine(weights):
    default, placed = build_engine(CFG, weights, "cpu"), build_engine(CFG, weights, "cpu", codec_device="cpu")
    assert placed.codec_stage.device == CPU
    a, b = default.generate(REQUEST), placed.generate(REQUEST)
    assert torch.equal(a.frames, b.frames) and torch.equal(a.audio, b.audio)


def test_stage_audio_equals_the_codec_decode(weights):
    engine = build_engine(CFG, weights, "cpu")
    codec = Codec.from_weights(CFG.codec, weights, "cpu", torch.float32)
    for n in (1, 7):
        codes = _codes(n)
        want = codec.decode(codes)
        assert torch.equal(engine.decode_audio(codes), want)
        assert torch.equal(CodecStage(codec).decode(codes), want)


def test_stream_chunks_are_on_cpu_and_equal_with_the_codec_device_given(weights):
    """Chunks hand the frames to the stage from the engine's device; the audio and frames come back on CPU."""
    schedule = StreamSchedule(first_chunk_frames=1, window_ends=(4, 8), window_stride=4)
    default, placed = build_engine(CFG, weights, "cpu"), build_engine(CFG, weights, "cpu", codec_device="cpu")
    a, b = list(default.stream(REQUEST, schedule)), list(placed.stream(REQUEST, schedule))
    assert len(b) > 2 and all(c.audio.device == CPU and c.frames.device == CPU for c in b)
    assert all(torch.equal(x.audio, y.audio) and torch.equal(x.frames, y.frames) for x, y in zip(a, b))
    assert torch.equal(torch.cat([c.frames for c in b]), placed.generate(REQUEST).frames)


@pytest.mark.parametrize(("source", "codec", "peer"), [
    ("cpu", "cpu", False),
    ("cuda:0", "cuda:0", False),
    ("cuda:0", "cuda:1", True),
    ("cuda:1", "cuda:0", True),
    ("cpu", "cuda:1", False),  # host codes (the harness's decode_audio): a plain copy
    ("cuda:0", "cpu", False),
])
def test_only_codes_on_another_gpu_take_the_event_and_stream_path(source, codec, peer):
    assert is_peer_hand_off(torch.device(source), torch.device(codec)) is peer
