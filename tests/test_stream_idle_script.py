"""scripts/stream_idle.py: busy and idle time of a stream's device events, per CUDA stream and over all of them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from stream_idle import device_events, stream_idle  # noqa: E402

MS = 1_000_000  # ns


def test_busy_idle_overlap_and_gaps_of_two_streams():
    """Frames on stream 7 with two gaps (1 ms, then 3 ms); a codec window on stream 9 overlapping the first frame
    by 0.5 ms and filling part of the second gap."""
    events = [(7, 0, 2 * MS), (7, 2 * MS, 4 * MS), (7, 5 * MS, 6 * MS), (7, 9 * MS, 10 * MS),
              (9, int(3.5 * MS), int(4.5 * MS)), (9, int(6.5 * MS), int(7.5 * MS))]
    idle = stream_idle(events)
    assert idle.span_ms == pytest.approx(10)
    # busy: [0, 4.5] + [5, 6] + [6.5, 7.5] + [9, 10]
    assert idle.busy_ms == pytest.approx(7.5) and idle.idle_ms == pytest.approx(2.5)
    assert idle.streams_ms == pytest.approx({"7": 6.0, "9": 2.0})
    assert idle.overlap_ms == pytest.approx(0.5)
    assert idle.gaps == [pytest.approx((7.5, 1.5)), pytest.approx((4.5, 0.5)), pytest.approx((6.0, 0.5))]


def test_no_device_events_is_none():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(4).sum()
    assert device_events(prof) == [] and stream_idle([]) is None
