"""What a worker reports of a profiled stream: per-frame self times of the ops (CPU engines) or kernels (CUDA
engines), read from the profiler's raw events. torch's key_averages() first builds a Python object per event and
links them into trees: seconds for the ~77k ops of a 5-frame drama3-tiny stream that itself takes 0.4 s (timed by
hand), on every correct evaluation of a CPU run. Self times need only the nesting within each thread, which one
sorted pass finds in about a tenth of that.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from torch.autograd import DeviceType

from .verdict import PROFILE_NAME_CHARS, PROFILE_ROWS

# the profiler's own bookkeeping and a tensor's metadata reads, which torch's summaries leave out as well
_NOT_OPS = frozenset({"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                      "profiler::_record_function_enter_new", "profiler::_record_function_exit", "aten::is_leaf",
                      "aten::output_nr", "aten::_version"})


@dataclass(slots=True)
class _Span:
    name: str
    start_ns: int
    end_ns: int
    annotation: bool  # a record_function range: it nests ops but is not one
    self_ns: int
    parent: _Span | None = None
    children: int = 0

    @property
    def call(self) -> bool:
        """Whether the span counts as a call: an op whose only child is the same op (a redispatch) is one call, as
        torch counts it; its time stays with the name either way."""
        return not (self.parent is not None and self.parent.name == self.name and self.parent.children == 1)


def _cpu_spans(events: Iterable) -> list[_Span]:
    """The host ops with their self times: each op's time less its direct children's, where a child is an op of the
    same thread that starts and ends within it (torch's rule for cpu_children)."""
    threads: dict[int, list[_Span]] = {}
    for e in events:
        if e.device_type() == DeviceType.CPU and not e.is_async() and e.name() not in _NOT_OPS:
            span = _Span(e.name(), e.start_ns(), e.end_ns(), e.is_user_annotation(), e.end_ns() - e.start_ns())
            threads.setdefault(e.start_thread_id(), []).append(span)
    spans: list[_Span] = []
    for thread in threads.values():
        thread.sort(key=lambda s: (s.start_ns, -s.end_ns))
        open_: list[_Span] = []
        for span in thread:
            while open_ and (span.start_ns >= open_[-1].end_ns or span.end_ns > open_[-1].end_ns):
                open_.pop()
            if open_:
                span.parent = open_[-1]
                span.parent.self_ns -= span.end_ns - span.start_ns
                span.parent.children += 1
            open_.append(span)
        spans += thread
    return spans


def _device_spans(events: Iterable) -> list[_Span]:
    """The kernels and copies on the GPU: nothing nests on the device, so each one's self time is its duration."""
    return [_Span(e.name(), e.start_ns(), e.end_ns(), e.is_user_annotation(), e.duration_ns())
            for e in events if e.device_type() == DeviceType.CUDA and e.name() not in _NOT_OPS]


def self_times(events: Iterable, cuda: bool) -> dict[str, list[int]]:
    """Name -> [self ns, calls] over the profiler's raw events: the GPU's kernels and copies (cuda), else the host's
    ops; range annotations (record_function) are left out, their ops counted on their own."""
    totals: dict[str, list[int]] = {}
    for span in _device_spans(events) if cuda else _cpu_spans(events):
        if not span.annotation:
            total = totals.setdefault(span.name, [0, 0])
            total[0] += span.self_ns
            total[1] += span.call
    return totals


def profile_summary(events: Iterable, cuda: bool, frames: int) -> dict:
    """The Profile reply (verdict.Profile's fields) of a stream of `frames` frames from the profiler's raw events
    (`prof.profiler.kineto_results.events()`): per-frame self times of the top entries and of all of them."""
    totals = self_times(events, cuda)
    ranked = sorted(totals.items(), key=lambda item: item[1][0], reverse=True)
    rows = [{"name": name.replace("\n", " ").replace("\r", " ")[:PROFILE_NAME_CHARS],
             "ms_per_frame": ns / 1e6 / frames, "calls_per_frame": calls / frames}
            for name, (ns, calls) in ranked[:PROFILE_ROWS]]
    return {"source": "cuda" if cuda else "cpu", "frames": frames, "rows": rows,
            "total_ms_per_frame": sum(ns for ns, _ in totals.values()) / 1e6 / frames,
            "total_calls_per_frame": sum(calls for _, calls in totals.values()) / frames}
