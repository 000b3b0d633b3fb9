"""Under test_triton_interpreter.py (which sets SWARM_TRITON_LAUNCHES), every kernel launch the interpreter runs is
written to that file, once per distinct launch: the interpreter runs kernels as Python and lets through code that
Triton's compiler refuses, so sm90_compile.py compiles each recorded launch afterwards. Kernels defined in the
scripts here are left out: they only drive the engines' device functions under the interpreter, never run on the
GPU, and their modules import only under TRITON_INTERPRET=1."""
from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from triton_launches import encode_launch

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def _record_triton_launches() -> Iterator[None]:
    path = os.environ.get("SWARM_TRITON_LAUNCHES")
    if path is None:
        yield
        return
    from triton.runtime.interpreter import InterpretedFunction

    run, launches = InterpretedFunction.run, set()

    def recording_run(self, *args, grid, warmup, **kwargs):
        if Path(inspect.getfile(self.fn)).resolve().parent != HERE:
            launches.add(encode_launch(self.fn, args, kwargs))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InterpretedFunction, "run", recording_run)
        yield
    Path(path).write_text("".join(f"{line}\n" for line in sorted(launches)))
