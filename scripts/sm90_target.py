"""Compiling Triton kernels for sm_90, the H200's target, on a machine without a GPU: a stand-in for the driver that
answers what JITFunction.warmup asks before it compiles. Used by tests/transforms/sm90_compile.py and
scripts/ptx_order.py."""
from __future__ import annotations

from triton.backends.compiler import GPUTarget

SM90 = GPUTarget("cuda", 90, 32)
SM90_SHARED = 232448  # bytes of shared memory a block may opt into on an H100/H200


class Sm90Driver:
    """All that JITFunction.run asks the driver when it compiles and does not launch (warmup)."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return SM90
