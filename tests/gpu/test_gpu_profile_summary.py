"""The worker's profile summary of a CUDA engine, from the profiler's raw events: per kernel, the same self device
time and launches as torch's key_averages(), record_function ranges (gpu_user_annotation on the device) left out."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from evaluator.profile_summary import profile_summary
from evaluator.verdict import PROFILE_NAME_CHARS, PROFILE_ROWS, Profile

pytestmark = pytest.mark.gpu


def test_kernel_times_and_launches_match_torchs_accounting():
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(64, 1024, device="cuda", generator=gen, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device="cuda", generator=gen, dtype=torch.bfloat16)
    F.linear(x, w)  # cuBLAS's handle and workspace before the profiled calls
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(6):
            with record_function("block"):
                y = F.silu(F.linear(x, w)) * 0.5
            x = (y + x).to(torch.float32).softmax(-1).to(torch.bfloat16)
        torch.cuda.synchronize()
    frames = 3
    summary = profile_summary(prof.profiler.kineto_results.events(), cuda=True, frames=frames)
    expected = {e.key[:PROFILE_NAME_CHARS]: (e.self_device_time_total, e.count) for e in prof.key_averages()
                if e.device_type == DeviceType.CUDA and not e.is_user_annotation}  # rows carry names cut short
    Profile.model_validate(summary)
    assert summary["source"] == "cuda" and "block" not in {r["name"] for r in summary["rows"]}
    assert len(summary["rows"]) == min(PROFILE_ROWS, len(expected)) and len(expected) >= 4
    for row in summary["rows"]:
        self_us, launches = expected[row["name"]]
        assert row["ms_per_frame"] * 1e3 * frames == pytest.approx(self_us, rel=1e-6), row
        assert row["calls_per_frame"] * frames == launches, row
    assert summary["total_ms_per_frame"] * 1e3 * frames == pytest.approx(sum(t for t, _ in expected.values()))
    assert summary["total_calls_per_frame"] * frames == sum(c for _, c in expected.values())
