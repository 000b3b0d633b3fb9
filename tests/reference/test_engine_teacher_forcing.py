"""teacher_forced(engine, rows, frames) agrees with the engine's own free generation."""
from __future__ import annotations

import pytest
import torch

from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")
GREEDY = SamplingParams(temperature=0.0, code_temperature=0.0, ras_window=0)


@pytest.fixture(scope="module")
def engine():
    return build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")


def test_greedy_argmax_of_forced_logits_reproduces_a_greedy_generation(engine):
    request = TTSRequest(text="Greedy decoding, twice.", sampling=GREEDY, max_frames=16, ignore_eos=True)
    frames = engine.generate(request).frames
    forced = teacher_forced(engine, build_rows(CFG, request), frames)
    assert forced.main.shape == (16, 1 + CFG.codebook_size)
    assert forced.codes.shape == (16, CFG.num_codebooks - 1, CFG.tower.head_size)
    index = forced.main.argmax(-1)
    main = torch.where(index == 0, CFG.eos_token_id, CFG.semantic_begin + index - 1)
    assert torch.equal(main, frames[:, 0])
    semantic = index > 0
    codes = forced.codes[..., :CFG.codec.residual_codebook_size].argmax(-1)
    assert torch.equal(codes[semantic], frames[semantic, 2:])


def test_forced_logits_equal_the_logits_seen_while_sampling(engine):
    request = TTSRequest(text="Sampled this time.", max_frames=10, seed=7)
    rows = build_rows(CFG, request)
    steps = [engine.prefill(rows, request.sampling, request.seed)]
    steps += [engine.decode_frame() for _ in range(9)]
    free_main = torch.stack([s.main_logits.clone() for s in steps])
    free_codes = torch.stack([s.code_logits.clone() for s in steps])
    forced = teacher_forced(engine, rows, torch.stack([s.frame for s in steps]), seed=123)
    torch.testing.assert_close(forced.main, free_main, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(forced.codes, free_codes, atol=1e-5, rtol=1e-5)


def test_teacher_forced_rejects_malformed_frames(engine):
    with pytest.raises(ValueError, match="frames"):
        teacher_forced(engine, build_rows(CFG, TTSRequest(text="x")), torch.zeros((0, 11), dtype=torch.long))
