"""Where a streamed request leaves the GPU idle: one stream under the profiler, its device events (kernels, copies,
fills: graph-replayed ones too) merged per CUDA stream and over all of them. A stream beyond its decode steps either
waits on the host (idle gaps, e.g. at chunk boundaries) or shares the GPU with the codec windows beside the frames
(the streams' overlap): this tells which. The profiler slows the host's launches, so idle time here is an upper
bound of the unprofiled stream's.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch.autograd import DeviceType

GAPS = 8  # the largest idle gaps reported


@dataclass
class StreamIdle:
    span_ms: float  # the first device event's start to the last one's end
    busy_ms: float  # time some device event ran
    idle_ms: float  # span_ms - busy_ms
    streams_ms: dict[str, float]  # CUDA stream id -> time its own events ran
    overlap_ms: float  # sum(streams_ms) - busy_ms: time two streams ran at once (counted once per extra stream)
    gaps: list[tuple[float, float]]  # the largest idle gaps, (start ms from the span's start, length ms)


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def stream_idle(events: list[tuple[int, int, int]]) -> StreamIdle | None:
    """(CUDA stream, start ns, end ns) of each device event -> busy and idle time; None without events."""
    if not events:
        return None
    merged = _union([(s, e) for _, s, e in events])
    span = merged[-1][1] - merged[0][0]
    busy = sum(e - s for s, e in merged)
    streams = {}
    for stream in sorted({st for st, _, _ in events}):
        streams[str(stream)] = sum(e - s for s, e in _union([(s, e) for st, s, e in events if st == stream])) / 1e6
    gaps = sorted(((b[0] - a[1], a[1]) for a, b in zip(merged, merged[1:])), key=lambda g: (-g[0], g[1]))[:GAPS]
    return StreamIdle(span_ms=span / 1e6, busy_ms=busy / 1e6, idle_ms=(span - busy) / 1e6, streams_ms=streams,
                      overlap_ms=sum(streams.values()) - busy / 1e6,
                      gaps=[((at - merged[0][0]) / 1e6, length / 1e6) for length, at in gaps])


def device_events(prof) -> list[tuple[int, int, int]]:
    """A finished torch.profiler run's device events as stream_idle takes them."""
    return [(e.device_resource_id(), e.start_ns(), e.end_ns()) for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA]
