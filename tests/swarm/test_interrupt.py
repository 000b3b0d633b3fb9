"""SIGTERM (a scheduler, `timeout`) or Ctrl-C on `swarm run` or `swarm eval`: every evaluator worker dies with it,
the run's state and wall time are saved, and the message names the command that resumes it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from knowledge_base import KnowledgeStore
from tests.processes import Process, alive, live_processes

ROOT = Path(__file__).resolve().parents[2]


def _workers_under(home: Path) -> list[int]:
    """Pids of processes working in `home` (evaluator workers run with their cwd in the run's work dirs)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/cwd").startswith(str(home)):
                    found.append(int(entry.name))
            except OSError:
                pass  # exited, or not ours to read
    return found


def _worker_children(pid: int) -> set[int]:
    """Evaluator workers among `pid`'s descendants (by command line: a worker whose cwd a private mount hides from
    _workers_under still shows here, while its swarm lives)."""
    table = live_processes()

    def descends(p: Process) -> bool:
        ancestor = p.parent
        while ancestor > 1 and ancestor != pid:
            ancestor = table[ancestor].parent if ancestor in table else 0
        return ancestor == pid

    return {p.pid for p in table.values() if p.is_worker and descends(p)}


def _interrupt(args: list[str], home: Path, sig: int) -> tuple[int, str]:
    """Start `swarm ARGS`, signal it once a worker is busy; its exit code and output."""
    # faulthandler: a swarm that starts no worker is aborted with every thread's stack in its output
    env = {**os.environ, "SWARM_HOME": str(home), "TMPDIR": str(home), "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}
    home.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "swarm", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while not seen and proc.poll() is None and time.monotonic() < deadline:
            seen.update(_workers_under(home), _worker_children(proc.pid))
            time.sleep(0.2)
        if not seen:
            if proc.poll() is None:  # hung: it has failed once in a CI run, workers start in ~5 s
                proc.send_signal(signal.SIGABRT)
            pytest.fail(f"no evaluator worker started; swarm printed:\n{proc.communicate(timeout=60)[0]}")
        time.sleep(1.0)  # let the worker get busy loading its model
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    assert _workers_under(home) == [] and not any(alive(p) for p in seen), output
    return proc.returncode, output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_kills_the_workers_and_keeps_the_run_resumable(tmp_path, sig):
    home = tmp_path / "home"
    code, output = _interrupt(["run", "targets/drama3_cpu.yaml"], home, sig)
    assert code == 130, output
    assert "interrupted" in output
    store = KnowledgeStore(home / "kb.sqlite")
    try:
        run = store.runs()[0]
    finally:
        store.close()
    assert f"swarm run targets/drama3_cpu.yaml --resume {run.id}" in output.replace("\n", " ")
    assert run.elapsed_s > 0  # the interrupted session's wall time still counts against the budget


def test_sigterm_on_eval_kills_its_workers(tmp_path):
    code, output = _interrupt(["eval", "reference_runtime/model", "--target", "targets/drama3_cpu.yaml"],
                              tmp_path / "home", signal.SIGTERM)
    assert code == 130 and "interrupted" in output, output
