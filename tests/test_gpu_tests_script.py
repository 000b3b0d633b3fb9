"""scripts/gpu_tests.py, the per-test runner for time-limited GPU leases, on CPU: each test in its own process under
its own limit, a hung test reported as a timeout without hiding the next, the rest listed as not run once the
budget is spent, a failure's message and a pass's own prints brought back."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = '''
import time

def test_prints():
    print("measured 1.5x")

def test_fails():
    assert 1 + 1 == 3, "the arithmetic is off"

def test_hangs():
    time.sleep(60)

def test_passes():
    pass

def test_hangs_too():
    time.sleep(60)

def test_never_reached():
    pass
'''


def test_each_test_gets_its_own_limit_and_the_budget_ends_the_list(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    done = subprocess.run([sys.executable, "scripts/gpu_tests.py", "--per-test-s", "10", "--budget-s", "34",
                           "--logs", str(tmp_path / "logs"), str(sample)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    lines = {line.split()[-1].split("::")[-1]: line.split()[0] for line in done.stdout.splitlines()
             if line.startswith(("passed", "FAILED", "TIMEOUT"))}
    # ~14 s in, 20 s are left: test_hangs_too starts; ~24 s in, 10 s are left: not enough for another
    assert lines == {"test_prints": "passed", "test_fails": "FAILED", "test_hangs": "TIMEOUT",
                     "test_passes": "passed", "test_hangs_too": "TIMEOUT"}, done.stdout
    assert "measured 1.5x" in done.stdout and "the arithmetic is off" in done.stdout
    assert done.stdout.rstrip().endswith("2 passed, 1 FAILED, 2 TIMEOUT, 1 not run") and done.returncode == 1
    assert len(list((tmp_path / "logs").iterdir())) == 5
