"""The worker's profile summary reads the profiler's raw events: per name, the same self time and call count as
torch's key_averages(), which it replaces because that builds an object per event (seconds for a tiny CPU stream)."""
from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from evaluator.profile_summary import profile_summary
from evaluator.verdict import PROFILE_ROWS, Profile


def _work(steps: int) -> None:
    """Nested ops (linear -> addmm, einsum -> bmm, conv), one redispatched to itself (mean's div_ -> div_: torch
    counts one call), and a record_function range."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, generator=gen)
    w = torch.randn(64, 64, generator=gen)
    image = torch.randn(1, 4, 16, 16, generator=gen)
    kernel = torch.randn(8, 4, 3, 3, generator=gen)
    for _ in range(steps):
        with record_function("block"):
            y = F.linear(x, w, w[0]) * 0.5
            y = torch.einsum("ij,jk->ik", y, w).to(torch.float64).to(torch.float32)
        F.conv2d(image, kernel, padding=1).relu_()
        x = torch.tanh(y) + y.mean(-1, keepdim=True)


def _torch_rows(prof) -> dict[str, tuple[float, int]]:
    return {e.key: (e.self_cpu_time_total, e.count) for e in prof.key_averages() if not e.is_user_annotation}


def test_self_times_and_calls_match_torchs_accounting():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        side = threading.Thread(target=_work, args=(3,))  # a second thread's ops nest only among themselves
        side.start()
        _work(5)
        side.join()
    frames = 4
    summary = profile_summary(prof.profiler.kineto_results.events(), cuda=False, frames=frames)
    expected = _torch_rows(prof)
    assert "block" not in expected and {"aten::addmm", "aten::div_", "aten::bmm"} <= set(expected)
    Profile.model_validate(summary)
    assert len(summary["rows"]) == min(PROFILE_ROWS, len(expected))
    for row in summary["rows"]:
        self_us, calls = expected[row["name"]]
        assert abs(row["ms_per_frame"] * 1e3 * frames - self_us) <= 1e-6 * max(self_us, 1.0), row
        assert row["calls_per_frame"] * frames == calls, row
    assert abs(summary["total_ms_per_frame"] * 1e3 * frames - sum(t for t, _ in expected.values())) <= 1e-3
    assert summary["total_calls_per_frame"] * frames == sum(c for _, c in expected.values())
    ranked = [r["ms_per_frame"] for r in summary["rows"]]
    assert ranked == sorted(ranked, reverse=True)
    largest = sorted((t for t, _ in expected.values()), reverse=True)[:len(ranked)]  # the rows are the top ones
    assert [r * 1e3 * frames for r in ranked] == pytest.approx(largest, rel=1e-9)
