"""Sampling: filters, exponential-race draws follow the filtered distribution, RAS and the code-range mask."""
from __future__ import annotations

import torch

from reference_runtime.api import SamplingParams
from reference_runtime.model.sampling import draw_code, draw_main, filter_logits, sample


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    kept = torch.isfinite(filter_logits(logits, 2, 1.0, True))
    assert kept.tolist() == [False, True, False, True]


def test_top_p_crossing_token_kept_or_dropped():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    keep = torch.isfinite(filter_logits(logits, 0, 0.7, keep_crossing=True))
    drop = torch.isfinite(filter_logits(logits, 0, 0.7, keep_crossing=False))
    assert keep.tolist() == [True, True, False, False]  # 0.5 < 0.7, adding 0.3 crosses: kept
    assert drop.tolist() == [True, False, False, False]
    tiny = torch.isfinite(filter_logits(logits, 0, 0.1, keep_crossing=False))
    assert tiny.tolist() == [True, False, False, False]  # the top token always survives


def test_exponential_race_samples_the_filtered_distribution():
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log().expand(40000, 4)
    draws = sample(logits, 1.0, 1.0, 3, True, _gen())
    freq = torch.bincount(draws, minlength=4).float() / draws.numel()
    torch.testing.assert_close(freq, torch.tensor([4 / 9, 3 / 9, 2 / 9, 0.0]), atol=0.01, rtol=0)


def test_temperature_zero_is_greedy_and_consumes_no_randomness():
    logits = torch.randn(5, 50)
    gen = _gen()
    state = gen.get_state()
    assert torch.equal(sample(logits, 0.0, 0.5, 10, True, gen), logits.argmax(-1))
    assert torch.equal(gen.get_state(), state)


def test_same_seed_same_draws_other_seed_other_draws():
    logits = torch.zeros(64, 100)
    a, b, c = (sample(logits, 1.0, 1.0, 0, True, _gen(s)) for s in (0, 0, 1))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_ras_replaces_a_repeated_semantic_draw():
    logits = torch.full((10,), -1e9)
    logits[5], logits[7] = 10.0, 9.9  # greedy first draw: 5; the RAS draw (T=1) is 5 or 7
    params = SamplingParams(temperature=0.0, ras_temperature=1.0, ras_top_k=0, ras_top_p=1.0)
    fresh = {int(draw_main(logits, params, torch.tensor([-1, 6, 3]), _gen(s))) for s in range(20)}
    repeated = {int(draw_main(logits, params, torch.tensor([5, 6, 3]), _gen(s))) for s in range(20)}
    assert fresh == {5} and repeated == {5, 7}
    eos_logits = torch.full((10,), -1e9)
    eos_logits[0], eos_logits[7] = 10.0, 9.9  # EOS (index 0) never triggers RAS, even when it repeats
    assert {int(draw_main(eos_logits, params, torch.tensor([0, 0, 0]), _gen(s))) for s in range(20)} == {0}


def test_codes_stay_below_the_codec_residual_size():
    logits = torch.zeros(3, 64)
    logits[:, 40:] = 50.0  # the head prefers codes the codec does not have
    params = SamplingParams(code_temperature=1.0, code_top_k=30, code_top_p=0.9)
    for seed in range(5):
        codes = draw_code(logits, params, 32, _gen(seed))
        assert codes.shape == (3,) and (codes < 32).all()
    greedy = draw_code(logits, SamplingParams(code_temperature=0.0), 32, _gen())
    assert (greedy < 32).all()
