"""The bytes a decoded frame reads, from the weight table, agree with docs/drama3_arch.md §5's hand count."""
from __future__ import annotations

import pytest

from reference_runtime.config import get_config
from reference_runtime.frame_bytes import frame_bytes, prefill_bytes


def test_full_size_matches_the_architecture_notes_floor():
    got = frame_bytes(get_config("drama3"))
    # §5: backbone 3.89 GB (with the narrowed lm_head), tower 2.06 GB, states 0.13 + KV 0.05 at 1k rows: ~6.1 GB
    assert got.backbone / 1e9 == pytest.approx(3.89, rel=0.01)
    assert got.tower / 1e9 == pytest.approx(2.06, rel=0.01)
    assert got.state / 1e9 == pytest.approx(0.13 + 0.05, rel=0.05)
    assert got.total / 1e9 == pytest.approx(6.1, rel=0.02)


def test_only_the_picked_experts_and_the_narrowed_head_count():
    config = get_config("drama3")
    full = frame_bytes(config)
    longer = frame_bytes(config, context_rows=8192)
    assert longer.total - full.total == pytest.approx(0.39e9 - 0.05e9, rel=0.05)  # §5: 0.39 GB of KV at 8k rows
    assert (longer.backbone, longer.tower) == (full.backbone, full.tower)
    fp32 = frame_bytes(config, compute_bytes=4)
    # the part that does not double with the activation dtype: the picked FP8 experts and their scales (§5: 1.01 GB)
    assert (2 * full.backbone - fp32.backbone) / 1e9 == pytest.approx(1.01, rel=0.01)


def test_a_prefill_reads_the_experts_its_rows_route_to():
    config = get_config("drama3")
    b = config.backbone
    one_row = b.num_layers * b.num_experts_per_tok  # a single row's picks: what a decoded frame's backbone reads
    assert prefill_bytes(config, one_row) == frame_bytes(config).backbone
    every = prefill_bytes(config, b.num_layers * b.num_experts)
    # all 10240 expert matrices, FP8 with their scales (256 x 40 x 3.15 MB = 32.2 GB), in place of a row's 1.01 GB
    assert every / 1e9 == pytest.approx(frame_bytes(config).backbone / 1e9 - 1.01 + 32.2, rel=0.005)
    assert prefill_bytes(config, one_row + 1) - prefill_bytes(config, one_row) == pytest.approx(3.15e6, rel=0.01)
