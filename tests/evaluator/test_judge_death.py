"""Workers die with their judge: a harness killed with SIGKILL leaves no worker burning the machine."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from tests.evaluator.candidate_factory import build_engine_body, make_candidate

JUDGE = """
import sys
from pathlib import Path
from evaluator import evaluate
from targets import load_target
evaluate(Path(sys.argv[1]), load_target(sys.argv[2]), baseline_dir=Path(sys.argv[3]), work_dir=Path(sys.argv[4]))
"""


def _workers_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"evaluator.worker" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_die_with_a_killed_judge(tmp_path, tiny_target):
    candidate = make_candidate(tmp_path, files=build_engine_body("import time\ntime.sleep(600)"))
    target_file = tmp_path / "target.yaml"
    target_file.write_text(yaml.safe_dump(tiny_target.model_dump(mode="json")))
    judge = subprocess.Popen([sys.executable, "-c", JUDGE, str(candidate), str(target_file), str(REFERENCE_DIR),
                              str(tmp_path / "work")], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + 120
    while len(workers := _workers_of(judge.pid)) < 2:  # the oracle and the hanging candidate
        assert judge.poll() is None and time.monotonic() < deadline, "the judge never started its workers"
        time.sleep(0.2)
    time.sleep(2)  # past confine(): the parent-death signal is armed once the worker is confined
    judge.send_signal(signal.SIGKILL)
    judge.wait()
    deadline = time.monotonic() + 15
    while any(_alive(w) for w in workers):
        assert time.monotonic() < deadline, f"workers {workers} outlived their judge"
        time.sleep(0.2)
