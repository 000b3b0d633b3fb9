"""Builds are not timed, so the engines an evaluation needs build at once: on the H200 a kept engine's build
(compiles, graph captures) took 84 s after the correctness cascade, a quarter of each evaluation."""
from __future__ import annotations

from evaluator import calibrate_noise, evaluate
from tests.evaluator.candidate_factory import build_engine_body, make_candidate, small_target

BUILD_S = 10.0  # each engine's build_engine sleeps this long


def _slow_build(tmp_path, name: str):
    return make_candidate(tmp_path, files=build_engine_body(f"import time\ntime.sleep({BUILD_S})"), name=name)


def test_the_kept_baseline_builds_beside_the_candidate(tiny_target, tmp_path):
    verdict = evaluate(_slow_build(tmp_path, "candidate"), tiny_target, baseline_dir=_slow_build(tmp_path, "kept"),
                       work_dir=tmp_path / "eval", secret_seed=21)
    assert verdict.status.is_correct, verdict.summary
    assert "baseline_build" not in verdict.stage_seconds
    assert verdict.stage_seconds["build"] < 2 * BUILD_S, verdict.stage_seconds
    # the judge asks one engine at a time, so their busy times, builds excluded, fit in the stages after the build
    assert set(verdict.engine_seconds) == {"candidate", "oracle", "baseline"}
    assert all(s > 0 for s in verdict.engine_seconds.values()), verdict.engine_seconds
    after_build = sum(verdict.stage_seconds.values()) - verdict.stage_seconds["build"]
    assert sum(verdict.engine_seconds.values()) <= after_build, (verdict.engine_seconds, verdict.stage_seconds)


def test_the_a_a_copies_build_at_once(tiny_target, tmp_path):
    """One build deadline under the two builds' sum: one after the other, the second would miss it."""
    target = small_target(tiny_target, build_s=1.7 * BUILD_S)
    calibration = calibrate_noise(_slow_build(tmp_path, "kept"), target, work_dir=tmp_path / "aa", secret_seed=22)
    assert calibration.pairs >= target.benchmark.warm_trials
