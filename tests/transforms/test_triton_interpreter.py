"""Runs each interpret_*.py (Triton transforms through the Triton interpreter on CPU) in a subprocess with
TRITON_INTERPRET=1: triton reads the flag when it is imported, so it cannot be switched on inside a session
that may already have imported triton, and must not leak into GPU tests of the same session. The interpreter runs
kernels as Python and lets through code that Triton's compiler refuses (a variable re-typed inside a runtime if
failed only on the H200), so every launch it ran is then compiled for sm_90 in a second subprocess without the
flag (sm90_compile.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)


def _interpret(script: str, root: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs the script under the interpreter: (the run, the file of the launches it recorded)."""
    launches = root / "launches.jsonl"
    # --basetemp: the engine packages the script writes (and its kernels import from) outlive its run, for the
    # compile step, whatever other pytest runs prune meanwhile
    result = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={root / 'run'}", str(HERE / script)],
                  os.environ | {"TRITON_INTERPRET": "1", "SWARM_TRITON_LAUNCHES": str(launches)})
    return result, launches


@pytest.fixture(scope="module")
def interpreted(request, tmp_path_factory) -> Iterator[dict[str, Future]]:
    """script -> its interpreted run, for every script this session runs, started at once and run as many at a time
    as there are cores: an interpreted run is one busy Python thread, so on CI's two cores two of them take the time
    of one (and the sm_90 compiles run alongside)."""
    pytest.importorskip("triton")
    scripts = [item.callspec.params["script"] for item in request.session.items if item.parent is request.node]
    pool = ThreadPoolExecutor(os.cpu_count())
    yield {s: pool.submit(_interpret, s, tmp_path_factory.mktemp(s.removesuffix(".py"))) for s in scripts}
    pool.shutdown(wait=False, cancel_futures=True)  # a session stopped early (-x, Ctrl-C) starts no more scripts


@pytest.mark.parametrize("script", sorted(p.name for p in HERE.glob("interpret_*.py")))
def test_under_the_interpreter_and_compiled_for_sm90(script, interpreted):
    result, launches = interpreted[script].result()
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert launches.exists() and launches.read_text(), f"{script} launched no kernel: nothing to compile for sm_90"
    # the repo root first: the engine packages import reference_runtime, which must be this checkout's (the
    # interpreted run found it in its cwd), not whatever checkout an editable install points at
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    result = _run([str(HERE / "sm90_compile.py"), str(launches)], env)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
