"""scripts/kernel_cost_fit.py: the line through the streaming GEMVs' bench figures, and the frame split by it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str, mb: float, us: float, kernel: str = "triton") -> dict:
    return {"shape": name, "kernel": kernel, "us": us, "gb_per_s": mb / us * 1e3}


def test_the_fit_recovers_a_known_line_and_splits_the_frame(tmp_path):
    """Kernels on 2 us + MB / 4 TB/s; a slower tile, cuBLAS and a routed family must not move the line."""
    rows = [_bench(name, mb, 2 + mb / 4) for name, mb in (("o_proj", 16), ("deltanet in_proj", 48), ("tower down", 24))]
    rows += [_bench("o_proj", 16, 9.0), _bench("o_proj", 16, 1.0, kernel="cublas")]
    rows += [{"kernel": "gate_up", "us": 9.0, "gb_per_s": 16 / 9.0 * 1e3}]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(rows))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel_cost_fit.py"), str(path), "--launches",
                           "100", "--frame-gb", "4", "--kernel-ms", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "fit over 3 streaming families: 2.00 us per launch + bytes at 4.00 TB/s"
    assert any(line.startswith("gate_up") and "+3.00  (not fitted)" in line for line in lines), done.stdout
    assert lines[-1] == ("frame: 2.00 ms of kernels = 0.20 ms for 100 launches + 1.00 ms for 4 GB + 0.80 ms in "
                         "kernels bound by dependent steps")
