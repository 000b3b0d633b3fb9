"""End to end on drama3-tiny: the reference against itself is correct and never a false win; slightly wrong
candidates are mismatches located to the frame and codebook; correctness alone skips the benchmark; an A/A
calibration raises the threshold."""
from __future__ import annotations

import pytest

from evaluator import Status, Verdict, calibrate_noise, evaluate
from evaluator.sandbox import REFERENCE_DIR
from tests.evaluator.candidate_factory import make_candidate


def test_reference_against_itself_is_correct_and_not_faster(self_verdict, tiny_target):
    v = self_verdict
    assert v.status in (Status.SLOWER, Status.NOISY), v.summary
    assert v.free_running_agreement_frames == [tiny_target.tolerances.frames] * tiny_target.tolerances.prompts
    assert v.comparison is not None and v.comparison.threshold == tiny_target.benchmark.min_speedup
    assert v.comparison.ci_low <= v.comparison.speedup <= v.comparison.ci_high
    for bench in (v.candidate_bench, v.baseline_bench):
        [figures] = bench.prompts
        assert figures.trials == tiny_target.benchmark.warm_trials
        assert 0 < figures.ttfa_ms_p50 and 0 < figures.frames_per_s_p50 and 0 < figures.rtf_p50
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
    assert calibration.pairs == tiny_target.benchmark.warm_trials * len(tiny_target.benchmark.prompts)
    assert calibration.ci_low <= calibration.speedup <= calibration.ci_high
    assert calibration.rel_iqr >= 0


def test_a_mismatch_the_kept_baseline_shares_is_inherited_and_a_new_one_is_not(tiny_target, tmp_path):
    """A kept baseline that slipped past the gate (its final norm's eps off): a candidate that changes nothing on
    that path fails the same prompts exactly as badly, so it passes with a note that names the inherited error;
    one that also scales a code head adds an error of its own, a mismatch; so is the first one against the
    reference as its baseline."""
    eps_edit = WRONG["backbone_norm_eps"][0]
    head = "logits.append(F.linear(x, self.heads[k - 1]).float())"
    baseline = make_candidate(tmp_path, eps_edit, name="baseline")
    same = make_candidate(tmp_path, eps_edit | {"tower.py": (head, head + "  # the same math")}, name="same")
    worse = make_candidate(tmp_path, eps_edit | WRONG["code5_head_scaled"][0], name="worse")

    def verdict(candidate, base, name):
        return evaluate(candidate, tiny_target, baseline_dir=base, work_dir=tmp_path / f"work_{name}", secret_seed=7,
                        correctness_only=True)
    inherited = verdict(same, baseline, "same")
    assert inherited.status == Status.CORRECT, inherited.summary
    notes = [e for e in inherited.evidence if e.message.startswith("inherited: ")]
    assert notes and notes[0].check == "teacher_forced" and notes[0].value > notes[0].limit
    assert "baseline_build" in inherited.stage_seconds
    assert verdict(worse, baseline, "worse").status == Status.MISMATCH
    alone = verdict(same, REFERENCE_DIR, "alone")
    assert alone.status == Status.MISMATCH and not any(e.message.startswith("inherited") for e in alone.evidence)
