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
def _patch_triton_language_once_per_launch() -> Iterator[None]:
    """Under TRITON_INTERPRET=1, triton patches triton.language for each kernel launch and again on every call of
    a device function inside it, which patches the same module with the same functions: a third of the
    interpreted time of a GEMV program. Only the launch's own patch is applied; a device function whose globals
    hold a language module the launch did not patch still patches it, as before."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton.runtime import interpreter

    patch_lang, launch = interpreter._patch_lang, []  # launch: the language modules the launch in progress patched

    def langs(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if v is interpreter.tl or v is interpreter.tl.core}

    class LaunchScope:
        def __init__(self, scope) -> None:
            self.scope = scope

        def restore(self) -> None:
            launch.clear()
            self.scope.restore()

    def once_per_launch(fn):
        if not launch:  # GridExecutor, starting a launch: it restores the scope at the end
            launch.append(langs(fn))
            return LaunchScope(patch_lang(fn))
        return interpreter._LangPatchScope() if langs(fn) <= launch[0] else patch_lang(fn)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter, "_patch_lang", once_per_launch)
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
