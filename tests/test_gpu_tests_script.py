"""scripts/gpu_tests.py, the per-test runner for time-limited GPU leases, on CPU: each test in its own process (or
with --shared, a file's tests in one until one hangs) under its own limit, a hung test (and what it started) killed
and reported as a timeout without hiding the next, a failure's message and a pass's own prints brought back, tests
that the budget cannot fit listed as not run, and a module that does not import reported rather than dropped."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = '''
import subprocess, sys, time

def test_prints():
    print("measured 1.5x")

def test_fails():
    assert 1 + 1 == 3, "the arithmetic is off"

def test_hangs():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a worker it started
    time.sleep(60)

def test_passes():
    pass
'''


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/gpu_tests.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


TABLE_LINE = re.compile(r"^(passed|FAILED|TIMEOUT|skipped) +[\d.]+ s of +\d+  \S+::(\w+)$")


def _results(stdout: str) -> dict[str, str]:
    """test name -> result, from the table lines only (a failure's traceback has FAILED lines of its own)."""
    return {m[2]: m[1] for m in map(TABLE_LINE.match, stdout.splitlines()) if m}


def _processes_running(command_part: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if command_part in text:
            found.append(text)
    return found


def test_each_test_runs_under_its_own_limit(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    done = _run(tmp_path, "--per-test-s", "8", "--budget-s", "200", "--logs", str(tmp_path / "logs"), str(sample))
    assert _results(done.stdout) == {"test_prints": "passed", "test_fails": "FAILED", "test_hangs": "TIMEOUT",
                                     "test_passes": "passed"}, done.stdout
    assert "measured 1.5x" in done.stdout and "the arithmetic is off" in done.stdout
    assert done.stdout.rstrip().endswith("2 passed, 1 FAILED, 1 TIMEOUT") and done.returncode == 1
    assert len(list((tmp_path / "logs").iterdir())) == 4
    assert not _processes_running("import time; time.sleep(60)"), "the hung test's own child outlived its timeout"


def test_shared_tests_keep_their_own_limits_and_a_hang_restarts_the_rest(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    done = _run(tmp_path, "--shared", "--per-test-s", "4", "--budget-s", "200", "--logs", str(tmp_path / "logs"),
                str(sample))
    assert _results(done.stdout) == {"test_prints": "passed", "test_fails": "FAILED", "test_hangs": "TIMEOUT",
                                     "test_passes": "passed"}, done.stdout
    assert "measured 1.5x" in done.stdout and "the arithmetic is off" in done.stdout
    assert done.stdout.rstrip().endswith("2 passed, 1 FAILED, 1 TIMEOUT") and done.returncode == 1
    assert len(list((tmp_path / "logs").iterdir())) == 2  # one process up to the hang, one after it
    assert not _processes_running("import time; time.sleep(60)"), "the hung test's own child outlived its timeout"


def test_a_spent_budget_lists_the_rest_as_not_run(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    for shared in ([], ["--shared"]):
        done = _run(tmp_path, *shared, "--per-test-s", "60", "--budget-s", "20", str(sample))
        assert done.stdout.rstrip().endswith("4 not run") and done.returncode == 1, done.stdout


def test_a_module_that_does_not_import_is_reported(tmp_path):
    broken = tmp_path / "test_broken.py"
    broken.write_text("import no_such_module_here\n\ndef test_x():\n    pass\n")
    done = _run(tmp_path, str(broken))
    assert done.returncode != 0 and "no_such_module_here" in done.stdout + done.stderr
