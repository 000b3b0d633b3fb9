"""`python -m evaluator`: calibrates (or reads a kept A/A), prints the verdict, writes its JSON, exits non-zero for
an incorrect candidate."""
from __future__ import annotations

import json

import yaml

from evaluator import NoiseCalibration
from evaluator.__main__ import main
from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from tests.evaluator.candidate_factory import build_engine_body, make_candidate

CPU_TARGET = str(REPO_ROOT / "targets" / "drama3_cpu.yaml")


def _kept_calibration(tmp_path, baseline=REFERENCE_DIR):
    path = tmp_path / "aa.json"
    path.write_text(NoiseCalibration(speedup=1.0, ci_low=0.95, ci_high=1.06, rel_iqr=0.02, pairs=15,
                                     baseline=str(baseline)).model_dump_json())
    return path


def test_cli_writes_the_verdict(tmp_path, capsys):
    candidate = make_candidate(tmp_path, files=build_engine_body('raise ValueError("cli probe")'))
    out = tmp_path / "verdict.json"
    code = main([str(candidate), "--target", CPU_TARGET, "--json", str(out), "--work-dir", str(tmp_path / "work"),
                 "--calibration", str(_kept_calibration(tmp_path))])
    assert code == 1
    assert capsys.readouterr().out.startswith("build_error: ValueError: cli probe")
    assert json.loads(out.read_text())["status"] == "build_error"


def test_cli_measures_and_keeps_the_calibration(tiny_target, tmp_path, capsys):
    target = tmp_path / "tiny.yaml"
    target.write_text(yaml.safe_dump(tiny_target.model_dump(mode="json")))
    kept = tmp_path / "aa.json"
    code = main([str(REFERENCE_DIR), "--target", str(target), "--work-dir", str(tmp_path / "work"),
                 "--calibration", str(kept)])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    calibration = NoiseCalibration.model_validate_json(kept.read_text())
    assert calibration.pairs == tiny_target.benchmark.warm_trials and "A/A" in captured.err
    assert captured.out.startswith(("slower:", "noisy:")), captured.out  # the reference is no win over itself
    assert "no A/A calibration" not in captured.out


def test_cli_refuses_a_calibration_of_another_baseline(tmp_path, capsys):
    other = _kept_calibration(tmp_path, baseline=tmp_path / "some_engine")
    assert main([str(tmp_path), "--target", CPU_TARGET, "--calibration", str(other)]) == 2
    assert "pass that baseline" in capsys.readouterr().err


def test_cli_rejects_a_bad_target(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbenchmark: {}\n")
    assert main([str(tmp_path), "--target", str(bad)]) == 2
    assert "invalid target" in capsys.readouterr().err
