"""ReferenceEngine on drama3-tiny: whole generations, streaming, EOS handling, the incremental path against
the cache-free forward_full, and input validation."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from reference_runtime.api import (SGLANG_SCHEDULE, Engine, SamplingParams, StreamSchedule, TTSRequest,
                                   VoiceReference)
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")
HELLO = TTSRequest(text="Hello", max_frames=24, ignore_eos=True, seed=3)


@pytest.fixture(scope="module")
def engine():
    return build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")


def _voice_request(frames: int) -> TTSRequest:
    gen = torch.Generator().manual_seed(5)
    codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, 20), generator=gen)
    return TTSRequest(text="Nice to meet you.", references=(VoiceReference("This is my voice.", codes),),
                      max_frames=frames, ignore_eos=True, seed=1)


def test_engine_satisfies_the_protocol(engine):
    assert isinstance(engine, Engine)


def test_generation_is_well_formed(engine):
    gen = engine.generate(HELLO)
    assert gen.frames.shape == (24, 11) and gen.frames.dtype == torch.long and gen.frames.device.type == "cpu"
    assert gen.audio.shape == (24 * CFG.codec.frame_samples,) and gen.audio.dtype == torch.float32
    assert torch.isfinite(gen.audio).all() and gen.audio.abs().max() > 0
    semantic = gen.frames[:, 0] != CFG.eos_token_id
    audio = gen.frames[semantic]
    assert torch.equal(audio[:, 0], CFG.semantic_begin + audio[:, 1])
    assert (audio[:, 1] < CFG.codebook_size).all() and (audio[:, 2:] < CFG.codec.residual_codebook_size).all()
    assert (gen.frames[~semantic, 1:] == 0).all()  # EOS frames carry zero codes


def test_generation_is_reproducible_under_a_seed_and_differs_under_another(engine):
    a, b = engine.generate(HELLO), engine.generate(HELLO)
    assert torch.equal(a.frames, b.frames) and torch.equal(a.audio, b.audio)
    other = engine.generate(dataclasses.replace(HELLO, seed=4))
    assert not torch.equal(a.frames, other.frames)


def test_generation_stops_at_eos_unless_ignored(engine):
    """Find a seed whose ignore_eos run draws an EOS; without ignore_eos the same draws stop right before it."""
    for seed in range(40):
        forced_on = engine.generate(dataclasses.replace(HELLO, seed=seed, max_frames=16))
        eos = (forced_on.frames[:, 0] == CFG.eos_token_id).nonzero()
        if len(eos):
            break
    else:
        pytest.fail("no seed drew an EOS within 16 frames")
    first_eos = int(eos[0])
    stopped = engine.generate(dataclasses.replace(HELLO, seed=seed, max_frames=16, ignore_eos=False))
    assert torch.equal(stopped.frames, forced_on.frames[:first_eos])
    assert stopped.audio.shape == (first_eos * CFG.codec.frame_samples,)


@pytest.mark.parametrize("schedule", [StreamSchedule(), StreamSchedule(first_chunk_frames=4, window_ends=(),
                                                                        window_stride=7)])
def test_stream_concatenates_to_the_generated_waveform(engine, schedule):
    chunks = list(engine.stream(HELLO, schedule))
    assert [c.frame_end for c in chunks] == schedule.chunk_ends(HELLO.max_frames)
    assert [c.frame_start for c in chunks] == [0] + [c.frame_end for c in chunks[:-1]]
    for c in chunks:
        assert c.audio.shape == ((c.frame_end - c.frame_start) * CFG.codec.frame_samples,)
    torch.testing.assert_close(torch.cat([c.audio for c in chunks]), engine.generate(HELLO).audio,
                               atol=1e-5, rtol=0)


def test_stream_with_overlap_window_keeps_chunk_lengths(engine):
    request = dataclasses.replace(HELLO, max_frames=40)
    chunks = list(engine.stream(request, SGLANG_SCHEDULE))
    assert [c.frame_end for c in chunks] == SGLANG_SCHEDULE.chunk_ends(40)
    assert sum(c.audio.numel() for c in chunks) == 40 * CFG.codec.frame_samples


def test_prefill_and_decode_match_the_full_sequence_forward(engine):
    request = _voice_request(frames=12)
    rows, frames = build_rows(CFG, request), engine.generate(request).frames
    main_full, codes_full = engine.model.forward_full(torch.cat((rows, frames)))
    R = rows.shape[0]
    steps = [engine.prefill(rows, request.sampling, 0, force=frames[0])]
    steps += [engine.decode_frame(force=f) for f in frames[1:]]
    main = torch.stack([s.main_logits for s in steps])
    codes = torch.stack([s.code_logits for s in steps])
    torch.testing.assert_close(main, main_full[R - 1:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(codes, codes_full[R - 1:], atol=1e-4, rtol=1e-4)
    assert torch.equal(torch.stack([s.frame for s in steps]), frames)


def test_forced_frame_overrides_sampling(engine):
    rows = build_rows(CFG, HELLO)
    frame = torch.tensor([CFG.semantic_begin + 7, 7, *range(1, 10)])
    step = engine.prefill(rows, SamplingParams(), seed=0, force=frame)
    assert torch.equal(step.frame, frame)
    assert step.main_logits.shape == (1 + CFG.codebook_size,)
    assert step.code_logits.shape == (CFG.num_codebooks - 1, CFG.tower.head_size)


def test_a_single_row_prompt_is_enough(engine):
    step = engine.prefill(torch.tensor([[CFG.special_token_id("<|voice|>")] + [0] * 10]), SamplingParams(), 0)
    for _ in range(3):
        step = engine.decode_frame()
    assert torch.isfinite(step.main_logits).all() and torch.isfinite(step.code_logits).all()


def test_invalid_inputs_name_the_limit(engine):
    with pytest.raises(ValueError, match="max_prompt_rows"):
        engine.prefill(torch.zeros((CFG.max_prompt_rows + 1, 11), dtype=torch.long), SamplingParams(), 0)
    with pytest.raises(ValueError, match=r"\(R, 11\) int64"):
        engine.prefill(torch.zeros((4, 10), dtype=torch.long), SamplingParams(), 0)
    with pytest.raises(ValueError, match="out of range"):
        engine.prefill(torch.full((4, 11), CFG.vocab_size), SamplingParams(), 0)
    with pytest.raises(ValueError, match="max_frames"):
        engine.generate(dataclasses.replace(HELLO, max_frames=0))
    engine.prefill(build_rows(CFG, HELLO), SamplingParams(), 0)
    with pytest.raises(ValueError, match="force="):
        engine.decode_frame(force=torch.zeros(10, dtype=torch.long))


def test_decode_before_prefill_is_an_error():
    fresh = build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")
    with pytest.raises(RuntimeError, match="prefill"):
        fresh.decode_frame()


def test_context_limit_is_enforced():
    config = dataclasses.replace(CFG, max_context_rows=60)
    small = build_engine(config, init_weights(config, seed=0, device="cpu"), "cpu")
    with pytest.raises(ValueError, match="max_context_rows=60"):
        small.generate(HELLO)  # 52 prompt rows + 24 frames
