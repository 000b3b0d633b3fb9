"""Teacher-forced logit and waveform comparisons on synthetic tensors: each failure is located."""
from __future__ import annotations

import random

import pytest
import torch

from evaluator.compare import Logits, check_logits, check_waveform, invalid_frame, outside_support
from evaluator.inputs import random_frame
from reference_runtime.api import SamplingParams
from reference_runtime.config import get_config
from targets.schema import ToleranceSpec

CONFIG = get_config("drama3-tiny")
TOL = ToleranceSpec()
F = 6


def _oracle(seed: int = 0) -> tuple[Logits, torch.Tensor]:
    """Random logits and frames whose tokens are each step's argmax (always inside the support)."""
    gen = torch.Generator().manual_seed(seed)
    main = torch.randn(F, 1 + CONFIG.codebook_size, generator=gen) * 3
    codes = torch.randn(F, CONFIG.num_codebooks - 1, CONFIG.tower.head_size, generator=gen) * 3
    main[:, 0] = -10  # never EOS
    valid = CONFIG.codec.residual_codebook_size
    code0 = main.argmax(-1) - 1
    frames = torch.cat((code0[:, None] + CONFIG.semantic_begin, code0[:, None], codes[:, :, :valid].argmax(-1)), 1)
    return Logits(main, codes), frames


def _check(cand: Logits, sampling: SamplingParams | None = SamplingParams()):
    ref, frames = _oracle()
    return check_logits(CONFIG, "p", ref, cand, frames, sampling, TOL)


def test_identical_logits_pass():
    ref, _ = _oracle()
    stats, evidence = _check(Logits(ref.main.clone(), ref.codes.clone()))
    assert evidence == [] and stats.max_abs_err == 0 and stats.top1 == 1.0


def test_worst_violation_is_located():
    ref, _ = _oracle()
    codes = ref.codes.clone()
    codes[3, 4, 7] += 0.01  # frame 3, code 5 (head 4)
    codes[1, 2, 0] += 0.005
    _, evidence = _check(Logits(ref.main.clone(), codes))
    assert (evidence[0].frame, evidence[0].codebook) == (3, 5)
    assert evidence[0].value == pytest.approx(0.01, rel=1e-3) and evidence[0].limit < evidence[0].value


def test_past_the_codec_codebook_is_ignored():
    ref, _ = _oracle()
    codes = ref.codes.clone()
    codes[:, :, CONFIG.codec.residual_codebook_size:] = float("nan")  # a narrowed head may leave garbage there
    assert _check(Logits(ref.main.clone(), codes))[1] == []


def test_non_finite_logits_fail():
    ref, _ = _oracle()
    main = ref.main.clone()
    main[2, 5] = float("nan")
    [e] = _check(Logits(main, ref.codes.clone()))[1]
    assert "non-finite" in e.message and (e.frame, e.codebook) == (2, 0)


def test_eos_logit_and_wrong_shapes():
    ref, _ = _oracle()
    main = ref.main.clone()
    main[4, 0] += 0.5
    assert any("EOS" in e.message and e.frame == 4 for e in _check(Logits(main, ref.codes.clone()))[1])
    [e] = _check(Logits(ref.main.double(), ref.codes.clone()))[1]
    assert "float32" in e.message


def test_oracle_token_outside_candidate_support():
    ref, frames = _oracle()
    codes = ref.codes.clone()
    codes[2, 0, frames[2, 2]] = -100.0  # the oracle's code 1 at frame 2 is now impossible for the candidate
    outside = outside_support(CONFIG, Logits(ref.main, codes), frames, SamplingParams(), TOL)
    assert outside.nonzero().tolist() == [[2, 1]]
    assert outside_support(CONFIG, ref, frames, SamplingParams(), TOL).sum() == 0


def test_invalid_frames_are_found():
    rng = random.Random(0)
    frames = torch.stack([random_frame(CONFIG, rng) for _ in range(4)])
    assert invalid_frame(CONFIG, frames) is None
    frames[2, 1] += 1  # code 0 no longer matches the main token
    assert invalid_frame(CONFIG, frames) == 2


def test_waveform():
    ref = torch.randn(3 * 2048)
    assert check_waveform("codec", "p", ref, ref.clone(), 1e-3, 2048) == []
    off = ref.clone()
    off[2048 * 2 + 5] += 0.1
    [e] = check_waveform("codec", "p", ref, off, 1e-3, 2048)
    assert e.frame == 2
    assert "expected float32" in check_waveform("codec", "p", ref, ref[:10], 1e-3, 2048)[0].message
    assert "expected float32" in check_waveform("codec", "p", ref, None, 1e-3, 2048)[0].message
