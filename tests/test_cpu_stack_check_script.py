"""scripts/cpu_stack_check.py refuses what it cannot check, before it spends minutes under the interpreter."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cpu_stack_check.py"


def _run(*args: str, interpret: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | ({"TRITON_INTERPRET": "1"} if interpret
                                                                               else {})
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)


def test_it_needs_the_interpreter():
    done = _run("--plus", "prefill_state_zero", interpret=False)
    assert done.returncode != 0 and "TRITON_INTERPRET=1" in done.stderr


def test_a_leap_is_a_base_not_a_checked_item():
    done = _run("--base", "leap", "--plus", "leap")
    assert done.returncode != 0 and "--base leap" in done.stderr
