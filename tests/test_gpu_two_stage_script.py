"""scripts/gpu_two_stage.py stays runnable: a CPU dry run writes its JSON, and without 2 GPUs a CUDA run says so."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_two_stage.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True,
                          timeout=300)


def test_dry_run_on_cpu_reports_both_placements(tmp_path):
    out = tmp_path / "two_stage.json"
    done = _run("--out", str(out), "--device", "cpu", "--config", "drama3-tiny", "--frames", "2", "--trials", "1",
                "--warmup", "0")
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == ["one_gpu", "two_gpu"]
    assert [b["name"] for b in results["two_gpu"]] == ["hello", "sentences", "voice"]
    assert all(len(b["trials"]) == 1 and b["trials"][0]["num_frames"] == 2 for b in results["two_gpu"])


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="the machine has 2 GPUs")
def test_cuda_run_without_two_gpus_exits_with_a_clear_message(tmp_path):
    done = _run("--out", str(tmp_path / "x.json"))
    assert done.returncode == 1 and "needs 2 visible GPUs" in done.stderr
