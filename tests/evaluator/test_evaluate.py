"""End to end on drama3-tiny: the reference against itself is correct and never a false win; slightly wrong
candidates are mismatches located to the frame and codebook; correctness alone skips the benchmark; an A/A
calibration raises the threshold."""
from __future__ import annotations

import pytest

from evaluator import Status, Verdict, calibrate_noise, evaluate
from evaluator.sandbox import REFERENCE_DIR
from evaluator.statistics import needs_margin
from tests.evaluator.candidate_factory import make_candidate


def test_reference_against_itself_is_correct_and_not_faster(self_verdict, tiny_target):
    v = self_verdict
    assert v.status in (Status.SLOWER, Status.NOISY), v.summary
    assert v.free_running_agreement_frames == [tiny_target.tolerances.frames] * tiny_target.tolerances.prompts
    assert v.comparison is not None and v.comparison.threshold == tiny_target.benchmark.min_speedup
    assert v.comparison.ci_low <= v.comparison.speedup <= v.comparison.ci_high
    for bench in (v.candidate_bench, v.baseline_bench):
        [figures] = bench.prompts
        assert tiny_target.benchmark.warm_trials <= figures.trials <= tiny_target.benchmark.warm_trials_cap
        assert 0 < figures.ttfa_ms_p50 and 0 < figures.frames_per_s_p50 and 0 < figures.rtf_p50
    assert v.comparison.pairs == v.candidate_bench.prompts[0].trials
    assert {"static", "build", "correctness", "benchmark"} <= set(v.stage_seconds)
    assert not [e for e in v.evidence if e.check == "static"]
    assert Verdict.model_validate_json(v.model_dump_json()) == v


# Each edit is small: the teacher-forced gate must see it and say where.
WRONG = {
    "code5_head_scaled": ({"tower.py": ("logits.append(F.linear(x, self.heads[k - 1]).float())",
                                        "logits.append(F.linear(x, self.heads[k - 1]).float() * (1.01 if k == 5 "
                                        "else 1.0))")}, 5),
    "backbone_norm_eps": ({"backbone.py": ("        return rms_norm(x, self.norm, self.eps)",
                                           "        return rms_norm(x, self.norm, 1e-2)")}, None),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_slightly_wrong_candidate_is_a_located_mismatch(case, tiny_target, tmp_path):
    edits, codebook = WRONG[case]
    verdict = evaluate(make_candidate(tmp_path, edits), tiny_target, baseline_dir=REFERENCE_DIR,
                       work_dir=tmp_path / "work", secret_seed=7)
    assert verdict.status == Status.MISMATCH, verdict.summary
    worst = verdict.evidence[0]
    assert worst.check == "teacher_forced" and worst.prompt and worst.frame is not None
    assert worst.codebook == codebook if codebook is not None else worst.codebook is not None
    assert worst.value > worst.limit
    assert verdict.comparison is None


def test_correctness_only_stops_before_the_benchmark(tiny_target, tmp_path):
    v = evaluate(REFERENCE_DIR, tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "ok", secret_seed=5,
                 correctness_only=True)
    assert v.status == Status.CORRECT and v.status.is_correct, v.summary
    assert "correctness" in v.stage_seconds and "benchmark" not in v.stage_seconds and v.comparison is None
    edits, _ = WRONG["backbone_norm_eps"]
    wrong = evaluate(make_candidate(tmp_path, edits), tiny_target, baseline_dir=REFERENCE_DIR,
                     work_dir=tmp_path / "wrong", secret_seed=5, correctness_only=True)
    assert wrong.status == Status.MISMATCH


def test_calibration_measures_the_baseline_against_itself(tiny_target, tmp_path):
    calibration = calibrate_noise(REFERENCE_DIR, tiny_target, work_dir=tmp_path, secret_seed=3)
    spec = tiny_target.benchmark
    assert spec.warm_trials <= calibration.pairs <= spec.warm_trials_cap  # one prompt: a pair per round
    assert calibration.ci_low <= calibration.speedup <= calibration.ci_high
    assert calibration.rel_iqr >= 0


def _erratic(tmp_path, name: str, low: float, high: float, alternate: bool = False):
    """The reference, but each stream first waits low-high times as long as its previous stream's frames took,
    at random (or low and high in turn): trials then spread far over 10% whatever the host's speed."""
    first = "        rows = build_rows(self.config, request, self.tokenizer).to(self.device)\n"
    last = "                step = self.decode_frame()\n"  # the frame loop's last line
    factor = f"random.uniform({low}, {high})"
    if alternate:  # any three trials in a row hold both waits, so their spread is wide on every run
        factor = f"({low}, {high})[_WAITS % 2]"
    wait = ("        import random, time\n        global _WAITS, _LAST\n        _WAITS = globals().get('_WAITS', 0) + 1\n"
            f"        time.sleep({factor} * globals().get('_LAST', 0.0))\n        began = time.perf_counter()\n")
    edits = [(first, wait + first), (last, last + "        _LAST = time.perf_counter() - began\n")]
    return make_candidate(tmp_path, {"engine.py": edits}, name=name)


def test_a_spread_undecided_verdict_gets_more_pairs_and_a_decided_one_does_not(tiny_target, tmp_path):
    """Against an erratic baseline the reference is faster by a spread too wide to decide on warm_trials pairs,
    so the benchmark measures up to max_warm_trials rounds; an engine that always waits longer than a whole
    reference trial is plainly slower after warm_trials, and stops there. The A/A of an erratic engine extends
    as well."""
    # a cap of twice warm_trials, not the default three times: the rounds past warm_trials are what is tested, and
    # each of this test's nine-round evaluations took ~20 s of the CPU suite
    spec = tiny_target.benchmark.model_copy(update={"max_warm_trials": 2 * tiny_target.benchmark.warm_trials})
    tiny_target = tiny_target.model_copy(update={"benchmark": spec})
    erratic = _erratic(tmp_path, "erratic", 1.0, 5.0, alternate=True)
    undecided = evaluate(REFERENCE_DIR, tiny_target, baseline_dir=erratic, work_dir=tmp_path / "undecided",
                         secret_seed=11)
    assert undecided.status is Status.NOISY and undecided.comparison.pairs == spec.warm_trials_cap, \
        undecided.summary
    slow = _erratic(tmp_path, "slow", 2.0, 4.0, alternate=True)
    slower = evaluate(slow, tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "slower", secret_seed=12)
    assert slower.status is Status.SLOWER and slower.comparison.pairs == spec.warm_trials, slower.summary
    assert slower.comparison.spread > 0.1
    # at random: two copies that waited in turn would wait alike in every pair. Random waits spread the A/A's pairs
    # past MAX_REL_IQR nearly always, but not always (waits of 0-8x: 9.2% in session 22's CI, 9.1% in session 31's),
    # so this checks the rule rather than the draw: the A/A stops short of the cap only once its spread is within
    # the margin. Up to 8x, not 4x: wider waits make the extension this test is about the usual case.
    jittery = _erratic(tmp_path, "jittery", 0.0, 8.0)
    calibration = calibrate_noise(jittery, tiny_target, work_dir=tmp_path / "aa", secret_seed=13)
    assert spec.warm_trials <= calibration.pairs <= spec.warm_trials_cap
    assert calibration.pairs == spec.warm_trials_cap or not needs_margin(calibration.rel_iqr, calibration.pairs)
