"""Programmatic dependent launch (templates/pdl/pdl.py) on the GPU: a chain of kernels, each reading what the one
before wrote and writing what the one before read, captured in a CUDA graph with every launch overlapping its
predecessor, gives exactly the serial result. Each kernel's first programs sleep, so a kernel that did not wait
would read a stale value or overwrite one still being read, and the sum would be off."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from knowledge_base.transforms.base import TEMPLATES

pytestmark = pytest.mark.gpu
LINKS = 64


def _pdl():
    spec = importlib.util.spec_from_file_location("pdl_under_test", TEMPLATES / "pdl" / "pdl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chain(pdl, on: bool):
    import triton
    import triton.language as tl

    @triton.jit
    def link(src_ptr, dst_ptr, n, BLOCK: tl.constexpr, GDC: tl.constexpr):
        pdl.pdl_enter(GDC)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if tl.program_id(0) < 4:  # a slow head: the next kernel's programs start while these still run
            tl.inline_asm_elementwise("nanosleep.u32 20000;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
        keep = offs < n
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=keep) + 1.0, mask=keep)

    n, block = 1 << 20, 1024
    a, b = torch.zeros(n, device="cuda"), torch.zeros(n, device="cuda")
    kwargs = pdl.pdl_args(a.device) if on else {"GDC": False}

    def run():
        for i in range(LINKS):
            src, dst = (a, b) if i % 2 == 0 else (b, a)
            link[(n // block,)](src, dst, n, block, **kwargs)

    return a, run


@pytest.mark.parametrize("on", [False, True], ids=["serial", "pdl"])
def test_a_chain_of_overlapping_launches_equals_the_serial_chain(on):
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9")
    pdl = _pdl()
    assert pdl.pdl_args(torch.device("cuda")) == {"GDC": True, "launch_pdl": True}
    a, run = _chain(pdl, on)
    run()  # compiles outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(5):
        a.zero_()
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full_like(a, float(LINKS)))
