"""Each interpret_*.py (Triton transforms through the Triton interpreter on CPU) passes under TRITON_INTERPRET=1,
and every kernel launch it ran compiles for sm_90. The runs start when collection ends and go on beside the rest
of the session (interpreted_runs.py); here their results are read."""
from __future__ import annotations

from pathlib import Path

import pytest
from interpreted_runs import BACKGROUND

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("script", sorted(p.name for p in HERE.glob("interpret_*.py")))
def test_under_the_interpreter_and_compiled_for_sm90(script, request):
    pytest.importorskip("triton")
    run = request.config.stash[BACKGROUND].runs[script].result()
    assert run.interpreted.returncode == 0, run.interpreted.stdout[-6000:] + run.interpreted.stderr[-2000:]
    assert run.compiled is not None, f"{script} launched no kernel: nothing to compile for sm_90"
    assert run.compiled.returncode == 0, run.compiled.stdout[-8000:] + run.compiled.stderr[-2000:]
