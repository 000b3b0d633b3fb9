"""Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel before
it in the stream still runs. A decode frame is a chain of hundreds of small kernels, each paying a launch and a
ramp-up of ~2 us (scripts/kernel_cost_fit.py); with it, the next kernel's programs are already resident when the
previous one drains.

Safe by construction: every kernel launched this way calls `pdl_enter` first, which waits until the previous
kernel has finished and its writes are visible, before any load or store. So a kernel never sees a half-written
input nor overwrites a buffer still being read, whatever kernel (launched this way or not) came before it; and
since each waits for its predecessor, which waited for its own, the wait covers the whole chain. It then lets
the next kernel launch at once: the next kernel's programs are scheduled only once all of this kernel's programs
are resident, so they never take an SM that this kernel still needs.
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl


@functools.cache
def _supported(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_args(device: torch.device) -> dict[str, bool]:
    """The launch keywords of a kernel whose first statement is pdl_enter(GDC): on a CUDA device of compute
    capability 9 or more, both on; off elsewhere, and under TRITON_INTERPRET=1 (the CPU tests), whose
    interpreter has no grid dependency control."""
    on = (device.type == "cuda" and os.environ.get("TRITON_INTERPRET") != "1"
          and _supported(device.index if device.index is not None else torch.cuda.current_device()))
    return {"GDC": on, "launch_pdl": on}


@triton.jit
def pdl_enter(GDC: tl.constexpr):
    """A kernel's first statement: with GDC (launched with programmatic dependent launch), wait for the previous
    kernel's completion and writes, then let the next kernel launch."""
    if GDC:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
