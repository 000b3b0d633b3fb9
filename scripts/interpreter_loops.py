"""Loops with a runtime trip count under Triton's CPU interpreter: it holds a kernel's int argument as a 1-element
array and turns it into a Python int with int(), which numpy 2 refuses for arrays of one dimension, so a kernel
looping over `tl.range(0, n)` with n an argument fails there (it compiles and runs on the GPU). The CPU tests
(tests/transforms/conftest.py) and scripts/cpu_stack_check.py run such kernels (triton_deltanet_chunks'
recurrence, whose pipelined loop needs the range form) with this in place."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def runtime_trip_counts() -> Iterator[None]:
    """While inside: an interpreted tensor of one element converts to an index, whatever its shape."""
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def with_index(tensor, scope) -> None:
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]) if
                       self.handle.data.size == 1 else int(self.handle.data))

    interpreter._patch_lang_tensor = with_index
    try:
        yield
    finally:
        interpreter._patch_lang_tensor = patch_tensor
