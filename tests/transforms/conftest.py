"""The interpret_*.py scripts' setup. Under test_triton_interpreter.py (which sets SWARM_TRITON_LAUNCHES), every
kernel launch the interpreter runs is written to that file, once per distinct launch: the interpreter runs kernels
as Python and lets through code that Triton's compiler refuses, so sm90_compile.py compiles each recorded launch
afterwards. Kernels defined in the scripts here are left out: they only drive the engines' device functions under
the interpreter, never run on the GPU, and their modules import only under TRITON_INTERPRET=1. Interpreted runs
are slow, so a session that runs test_triton_interpreter.py starts them when its collection ends
(interpreted_runs.py)."""
from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from interpreted_runs import BACKGROUND, Background
from triton_launches import encode_launch

from scripts.interpreter_loops import runtime_trip_counts

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session", autouse=True)
def _patch_triton_language_once_per_launch() -> Iterator[None]:
    """Under TRITON_INTERPRET=1, triton patches the language modules a kernel's globals hold at each launch, and
    again at every call of a device function inside it (tl.sum, tl.zeros and the kernels' own helpers), although
    that patches the same modules with the same functions: about a third of the interpreted time. Here each module
    is patched once per launch; what the launch patched is restored after it as before, and what a device function
    patched stays patched, as before."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton.runtime import interpreter

    patch_lang, run_grid = interpreter._patch_lang, interpreter.GridExecutor.__call__
    patched: set[int] = set()  # the modules patched since the launch in progress began

    def once_per_launch(fn):
        new = {id(v) for v in fn.__globals__.values() if v is interpreter.tl or v is interpreter.tl.core} - patched
        patched.update(new)
        return patch_lang(fn) if new else interpreter._LangPatchScope()  # (an empty scope: nothing to restore)

    def launch(self, *args, **kwargs):
        patched.clear()
        try:
            return run_grid(self, *args, **kwargs)
        finally:
            patched.clear()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter, "_patch_lang", once_per_launch)
        patch.setattr(interpreter.GridExecutor, "__call__", launch)
        yield


@pytest.fixture(scope="session", autouse=True)
def _runtime_trip_counts() -> Iterator[None]:
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    with runtime_trip_counts():
        yield


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


def pytest_collection_finish(session: pytest.Session) -> None:
    """Starts test_triton_interpreter.py's scripts as soon as the session knows it will run them (interpreted_runs.py
    says why)."""
    scripts = [item.callspec.params["script"] for item in session.items
               if item.path.name == "test_triton_interpreter.py"]
    if scripts and not session.config.option.collectonly and importlib.util.find_spec("triton") is not None:
        background = session.config.stash[BACKGROUND] = Background()
        background.start(scripts)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if background := session.config.stash.get(BACKGROUND, None):
        background.stop()
