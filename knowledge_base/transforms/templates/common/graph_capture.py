"""Record a step function into a CUDA graph: run it once on a side stream first (cuBLAS / cuDNN set themselves
up lazily, which capture forbids), put back the state that run changed, then capture into a shared memory pool.
Graphs sharing a pool must keep all cross-replay state outside it: their temporaries may overlap. Graphs captured
on one stream share one cuBLAS workspace (torch keys it by stream): graphs that replay concurrently must be captured
on different streams, or their GEMMs race on it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def capture(fn: Callable[[], torch.Tensor | None], pool: tuple, keep: Sequence[torch.Tensor] = (),
            stream: torch.cuda.Stream | None = None) -> tuple[torch.cuda.CUDAGraph, torch.Tensor | None]:
    """(graph, the tensor fn returned during capture: the graph's static output, valid right after replay).
    `stream`: the capture stream (None: torch.cuda.graph's default, shared by every capture that passes none)."""
    saved = [t.clone() for t in keep]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    for t, s in zip(keep, saved):
        t.copy_(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = fn()
    return graph, out
