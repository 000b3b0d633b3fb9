"""scripts/gpu_concurrency.py stays runnable: a CPU dry run serves streams at once from instances of the reference
and checks each against the same request served alone."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_concurrency.py"


def test_dry_run_serves_streams_at_once_and_matches_them_alone(tmp_path):
    out = tmp_path / "conc.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--recipe", "reference", "--device", "cpu",
                           "--config", "drama3-tiny", "--streams", "2,1", "--frames", "3", "--trials", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["instances"] == 2 and [r["streams"] for r in report["rows"]] == [1, 2]
    assert all(r["equal_to_alone"] and r["aggregate_frames_per_s"] > 0 for r in report["rows"])
    assert report["rows"][0]["vs_one"] == 1.0 and report["overlap_frames"] == 32
    assert "2 streams:" in done.stdout


def test_an_unknown_recipe_is_named(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json"), "--recipe", "nope",
                           "--device", "cpu", "--config", "drama3-tiny"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "unknown recipe 'nope'" in done.stderr


def test_kept_plus_asks_for_a_kept_engine(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json"), "--recipe", "reference",
                           "--kept-plus", "triton_code_heads", "--device", "cpu", "--config", "drama3-tiny"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "--kept-plus needs --kept" in done.stderr
