"""Runs each interpret_*.py (Triton transforms through the Triton interpreter on CPU) in a subprocess with
TRITON_INTERPRET=1: triton reads the flag when it is imported, so it cannot be switched on inside a session
that may already have imported triton, and must not leak into GPU tests of the same session."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("script", sorted(p.name for p in HERE.glob("interpret_*.py")))
def test_under_the_interpreter(script):
    pytest.importorskip("triton")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / script)],
        env=os.environ | {"TRITON_INTERPRET": "1"}, cwd=HERE.parents[1], capture_output=True, text=True, timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
