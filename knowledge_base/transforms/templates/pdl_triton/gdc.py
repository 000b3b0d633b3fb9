"""Programmatic dependent launch (PDL, sm_90+) of the decode frame's Triton kernels. A frame of ~430 short
kernels spends a good part of each kernel on its start (launch, the first DRAM round trips) and its tail (the last
programs running alone). A kernel launched with PDL may start while the kernel before it in the stream still runs:
it prefetches into L2 the weight rows it will read (no kernel writes weights), then waits until the previous grid
has completed and its writes are visible, and only then touches any activation, cache or counter and lets the
next kernel start. Every PDL kernel completes only after its wait, so each kernel still runs after everything
before it in the stream, as without PDL; a kernel launched without PDL waits for the one before it as usual.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


def pdl(enabled: bool, t: torch.Tensor) -> bool:
    """Whether to launch with PDL: the params file asks for it and t lives on a GPU that has it (sm_90+)."""
    return enabled and t.is_cuda and torch.cuda.get_device_capability(t.device)[0] >= 9


@triton.constexpr_function
def _lines(k: int, line: int) -> int:
    """A tl.arange length covering k columns in steps of `line` (a power of two)."""
    return triton.next_power_of_2(triton.cdiv(k, line))


@triton.jit
def prefetch_rows(w_ptr, rows, K: tl.constexpr):
    """Prefetch into L2 the 128-byte lines of rows `rows` of the row-major (., K) matrix at w_ptr (no registers:
    the loads after the wait find them there). Steps past the row's end prefetch its last element's line again."""
    LINE: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
    cols = tl.minimum(tl.arange(0, _lines(K, LINE)) * LINE, K - 1)
    lines = w_ptr + rows[:, None] * K + cols[None, :]
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [lines], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def wait_previous(PDL: tl.constexpr):
    """Under PDL: wait until the previous kernel's grid has completed and its writes are visible, then let the
    next kernel's programs start (they run only their own prologue until their own wait)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
