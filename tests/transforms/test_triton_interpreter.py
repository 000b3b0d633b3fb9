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
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("script", sorted(p.name for p in HERE.glob("interpret_*.py")))
def test_under_the_interpreter_and_compiled_for_sm90(script, tmp_path):
    pytest.importorskip("triton")
    launches = tmp_path / "launches.jsonl"
    # --basetemp: the engine packages the script writes (and its kernels import from) outlive its run, for the
    # compile step, whatever other pytest runs prune meanwhile
    result = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'run'}",
                   str(HERE / script)], os.environ | {"TRITON_INTERPRET": "1", "SWARM_TRITON_LAUNCHES": str(launches)})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert launches.exists() and launches.read_text(), f"{script} launched no kernel: nothing to compile for sm_90"
    # the repo root first: the engine packages import reference_runtime, which must be this checkout's (the
    # interpreted run found it in its cwd), not whatever checkout an editable install points at
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    result = _run([str(HERE / "sm90_compile.py"), str(launches)], env)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
