"""python sm90_compile.py LAUNCHES: compiles every kernel launch recorded under the Triton interpreter (see
conftest.py) for sm_90, the H200's target, down to its cubin, without a GPU. Run without TRITON_INTERPRET, so the
kernels import as real JITFunctions; each launch goes through JITFunction.warmup, i.e. the GPU launch path short of
the launch: the same argument binding, specialization, launch options and compiler, and then the shared memory
check the driver makes when it loads a kernel. Prints each distinct error with the kernel and its arguments and
exits 1. Launches that specialize alike compile once (Triton's caches).

What it does not cover: flags the wrappers derive from the device (`NATIVE_FP8`, `PRECISE_LOG`: set from
x.is_cuda) are compiled as the interpreter saw them, i.e. the CPU branch; and the shapes and dtypes are the
interpreter tests' (mostly drama3-tiny), not the full model's."""
from __future__ import annotations

import importlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from triton import AsyncCompileMode, FutureKernel
from triton.runtime.driver import driver
from triton.runtime.errors import OutOfResources
from triton_launches import Launch, decode_launch

from scripts.sm90_target import SM90_SHARED, Sm90Driver


def _compile(launch: Launch) -> FutureKernel:
    if launch.root not in sys.path:
        sys.path.insert(0, launch.root)
    kernel = getattr(importlib.import_module(launch.module), launch.name)
    return kernel.warmup(*launch.args, grid=(1,), **launch.kwargs)


def _check_loadable(compiling: FutureKernel) -> None:
    shared = compiling.result().metadata.shared
    if shared > SM90_SHARED:
        raise OutOfResources(shared, SM90_SHARED, "shared memory")


def _describe(launch: Launch) -> str:
    named = [*zip(launch.params, launch.args), *launch.kwargs.items()]
    return f"{launch.module}.{launch.name}({', '.join(f'{n}={a!r}' for n, a in named)})"


def main(path: Path) -> int:
    driver.set_active(Sm90Driver())
    launches = [decode_launch(line) for line in path.read_text().splitlines()]
    # error -> the first launch that raised it: launches differing only in a runtime int often fail alike
    errors: dict[str, str] = {}
    compiling: list[tuple[Launch, FutureKernel]] = []
    # in threads (the compiler releases the GIL): about twice as fast on CI's two cores
    with ThreadPoolExecutor(os.cpu_count()) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for launch in launches:
            try:
                compiling.append((launch, _compile(launch)))
            except Exception as e:  # noqa: BLE001 - any failure to compile is what this reports
                errors.setdefault(f"{type(e).__name__}: {e}", _describe(launch))
        for launch, future in compiling:
            try:
                _check_loadable(future)
            except Exception as e:  # noqa: BLE001
                errors.setdefault(f"{type(e).__name__}: {e}", _describe(launch))
    for error, kernel in errors.items():
        print(f"sm_90 compile failed: {kernel}\n{error}\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
