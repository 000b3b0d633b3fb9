"""The interpret_*.py scripts' runs for test_triton_interpreter.py, started when collection ends (conftest.py) and
run in the background while the rest of the session goes on: they are ~40% of the suite's CPU time (~600 of 1400
core-s on a 2-core machine) while the other tests keep about one core busy (torch at one thread), so they take what
the others leave (the suite 1010 -> 909 s there). Each run is niced to the lowest priority, its session's scheduler
group too (_NICE_SESSION: the process's nice alone left the runs an equal share), so a timing test beside it keeps
its core (the suite 966 -> 709-745 s on a 2-core machine).

A run is the script under the Triton interpreter in a subprocess with TRITON_INTERPRET=1 (triton reads the flag
when it is imported, so it cannot be switched on inside a session that may already have imported triton, and must
not leak into GPU tests of the same session), then every launch it recorded compiled for sm_90 in a second
subprocess without the flag (sm90_compile.py): the interpreter runs kernels as Python and lets through code that
Triton's compiler refuses (a variable re-typed inside a runtime if failed only on the H200)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@dataclass(frozen=True)
class ScriptRun:
    interpreted: subprocess.CompletedProcess
    launches: Path  # the distinct kernel launches the interpreted run recorded
    compiled: subprocess.CompletedProcess | None  # None: the interpreted run failed or launched nothing


@dataclass
class Background:
    """The scripts' runs in a pool of threads, each waiting on its subprocesses; `stop` ends them all."""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="swarm-interpreted-")))
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(os.cpu_count()))
    runs: dict[str, Future[ScriptRun]] = field(default_factory=dict)
    _live: set[subprocess.Popen] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: bool = False

    def start(self, scripts: list[str]) -> None:
        """As many runs at a time as there are cores: an interpreted run is one busy Python thread."""
        for script in scripts:
            self.runs[script] = self.pool.submit(self._script, script)

    def stop(self) -> None:
        """Kills what still runs (a session stopped early by -x or Ctrl-C does not wait for them) and removes the
        runs' files."""
        with self._lock:
            self._stopped = True
            for proc in self._live:
                _kill(proc)
        self.pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def _script(self, script: str) -> ScriptRun:
        root = self.root / script.removesuffix(".py")
        root.mkdir()
        launches = root / "launches.jsonl"
        # --basetemp: the engine packages the script writes (and its kernels import from) outlive its run, for the
        # compile step
        interpreted = self._run(["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={root / 'run'}",
                                 str(HERE / script)],
                                os.environ | {"TRITON_INTERPRET": "1", "SWARM_TRITON_LAUNCHES": str(launches)})
        if interpreted.returncode or not (launches.exists() and launches.read_text()):
            return ScriptRun(interpreted, launches, None)
        # the repo root first: the engine packages import reference_runtime, which must be this checkout's (the
        # interpreted run found it in its cwd), not whatever checkout an editable install points at
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
        return ScriptRun(interpreted, launches, self._run([str(HERE / "sm90_compile.py"), str(launches)], env))

    def _run(self, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        command = ["sh", "-c", _NICE_SESSION, "sh", "nice", "-n", "19", sys.executable, *args]
        with self._lock:
            if self._stopped:
                return subprocess.CompletedProcess(command, -signal.SIGKILL, "", "stopped with the session")
            proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
            self._live.add(proc)
        try:
            out, err = proc.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            _kill(proc)
            out, err = proc.communicate()
            err += "\nkilled after 1200 s"
        finally:
            with self._lock:
                self._live.discard(proc)
        return subprocess.CompletedProcess(command, proc.returncode, out, err)


# Each run starts a session of its own (killed as a group), and where the kernel groups sessions for scheduling
# (autogroups, sched(7): on by default in most distributions' kernels, this 2-core machine's included) a process's
# nice ranks it only within its session's group while the groups share the CPUs equally: `nice -n 19` alone left
# each run an equal share beside the foreground tests' processes, which ran ~2x slower in the suite than alone
# (the suite took 966 s; the foreground alone 647 s and the runs alone ~700 core-s). So the session's group is
# niced too: a lower priority needs no privilege, an unprivileged write is refused (EAGAIN) within 100 ms of
# another anywhere on the machine (hence the retries), and without autogroups there is no file and nothing to do.
_NICE_SESSION = ("if [ -e /proc/self/autogroup ]; then for _ in 1 2 3 4 5 6 7 8 9 10; do "
                 "{ echo 19 > /proc/self/autogroup; } 2>/dev/null && break; sleep 0.1; done; fi; exec \"$@\"")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


BACKGROUND = pytest.StashKey[Background]()
