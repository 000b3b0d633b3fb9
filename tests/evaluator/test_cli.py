"""`python -m evaluator` and the one-off evaluation under it: prints the verdict, writes its JSON, exits non-zero
for an incorrect candidate; a would-be win is decided against an A/A band measured then (and kept for the next
candidate in --calibration), a kept band is used only for its own baseline, target and machine."""
from __future__ import annotations

import json

from evaluator import NoiseCalibration, Status, Verdict, benchmark_protocol
from evaluator import one_off
from evaluator.__main__ import main
from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from evaluator.statistics import decide, threshold
from evaluator.verdict import Comparison
from targets.schema import load_target
from tests.evaluator.candidate_factory import build_engine_body, make_candidate

CPU_TARGET = REPO_ROOT / "targets" / "drama3_cpu.yaml"
BAND = NoiseCalibration(speedup=1.0, ci_low=0.95, ci_high=1.06, rel_iqr=0.02, pairs=15, baseline="ref",
                        ttfa_ci_low=0.93, ttfa_ci_high=1.08, protocol=benchmark_protocol(load_target(CPU_TARGET)))


def test_cli_writes_the_verdict(tmp_path, capsys):
    candidate = make_candidate(tmp_path, files=build_engine_body('raise ValueError("cli probe")'))
    out = tmp_path / "verdict.json"
    code = main([str(candidate), "--target", str(CPU_TARGET), "--json", str(out), "--work-dir",
                 str(tmp_path / "work"), "--calibration", str(tmp_path / "aa.json")])
    assert code == 1
    assert capsys.readouterr().out.startswith("build_error: ValueError: cli probe")
    assert json.loads(out.read_text())["status"] == "build_error"
    assert not (tmp_path / "aa.json").exists()  # a broken candidate costs no A/A


def test_cli_rejects_a_bad_target(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbenchmark: {}\n")
    assert main([str(tmp_path), "--target", str(bad)]) == 2
    assert "invalid target" in capsys.readouterr().err


class _Judge:
    """Stands in for evaluate() and calibrate_noise(): a would-be win of `ci_low`, and the calls they got."""

    def __init__(self, ci_low: float):
        self.ci_low, self.calibrations, self.measured = ci_low, [], 0

    def evaluate(self, candidate_dir, target, *, calibration, **_) -> Verdict:
        self.calibrations.append(calibration)
        c = Comparison(speedup=self.ci_low + 0.02, ci_low=self.ci_low, ci_high=self.ci_low + 0.04,
                       threshold=threshold(target.benchmark.min_speedup, calibration), ttfa_ratio=1.0,
                       calibrated=calibration is not None)
        status, summary = decide(c, target.benchmark.max_plausible_speedup)
        return Verdict(status=status, candidate=str(candidate_dir), baseline="ref", summary=summary, comparison=c)

    def calibrate(self, baseline_dir, target, **_) -> NoiseCalibration:
        self.measured += 1
        return BAND


def test_a_would_be_win_is_decided_by_an_aa_band_measured_then_and_kept(tmp_path, monkeypatch):
    judge = _Judge(ci_low=1.10)
    monkeypatch.setattr(one_off, "evaluate", judge.evaluate)
    monkeypatch.setattr(one_off, "calibrate_noise", judge.calibrate)
    target, keep = load_target(CPU_TARGET), tmp_path / "aa.json"
    run = dict(baseline_dir=REFERENCE_DIR, work_dir=tmp_path, keep=keep, say=lambda line: None)
    verdict = one_off.evaluate_one_off(tmp_path / "cand", target, **run)
    assert verdict.status is Status.PASS and verdict.comparison.calibrated and verdict.comparison.threshold == 1.06
    assert judge.measured == 1 and judge.calibrations == [None]
    one_off.evaluate_one_off(tmp_path / "cand", target, **run)  # the next candidate reads the kept band
    assert judge.measured == 1 and judge.calibrations == [None, BAND]

    narrow = _Judge(ci_low=1.04)  # above min_speedup, but not above the band
    monkeypatch.setattr(one_off, "evaluate", narrow.evaluate)
    monkeypatch.setattr(one_off, "calibrate_noise", narrow.calibrate)
    verdict = one_off.evaluate_one_off(tmp_path / "cand", target, **run | {"keep": None})
    assert verdict.status is Status.SLOWER and "not faster beyond noise" in verdict.summary


def test_a_kept_calibration_serves_only_its_own_baseline_and_target(tmp_path, capsys, monkeypatch):
    judge = _Judge(ci_low=1.10)
    monkeypatch.setattr(one_off, "evaluate", judge.evaluate)
    monkeypatch.setattr(one_off, "calibrate_noise", judge.calibrate)
    keep = tmp_path / "aa.json"
    assert main([str(tmp_path), "--target", str(CPU_TARGET), "--calibration", str(keep)]) == 0
    other = tmp_path / "other_engine"
    other.mkdir()
    assert main([str(tmp_path), "--target", str(CPU_TARGET), "--baseline", str(other), "--calibration",
                 str(keep)]) == 2
    assert "was measured for baseline" in capsys.readouterr().err
    other_settings = json.loads(keep.read_text())
    other_settings["calibration"]["protocol"] = "0123456789ab"  # e.g. before the target's streams overlapped
    keep.write_text(json.dumps(other_settings))
    assert main([str(tmp_path), "--target", str(CPU_TARGET), "--calibration", str(keep)]) == 2
    assert "under other benchmark settings" in capsys.readouterr().err
    older = json.loads(keep.read_text())
    del older["calibration"]["ttfa_ci_low"], older["calibration"]["ttfa_ci_high"]
    keep.write_text(json.dumps(older))
    assert main([str(tmp_path), "--target", str(CPU_TARGET), "--calibration", str(keep)]) == 2
    assert "before the A/A band of time to first audio" in capsys.readouterr().err
    keep.write_text('{"speedup": 1.0}')
    assert main([str(tmp_path), "--target", str(CPU_TARGET), "--calibration", str(keep)]) == 2
    assert "is not a kept A/A calibration" in capsys.readouterr().err
