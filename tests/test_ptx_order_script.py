"""scripts/ptx_order.py stays runnable on a machine without a GPU, every kernel it lists compiles without spills
(the prefill's DeltaNet front and chunk kernels included, at their default tiles), the kernels that session 14 made
issue every load before their first reduction still do (one run of loads before any barrier), and the loops keep
the barriers the measured kernels have: 14 per token in the prefill's delta rule, 3+3 per search step in a code
draw (session 20's 4 and 5+5 ran slower on the GPU: session 21 reverted them)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _table(*args: str) -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "ptx_order.py"), *args], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.rsplit(maxsplit=5) for line in done.stdout.splitlines()[1:]]
    return {name.strip(): rest for name, *rest in rows}


def test_every_kernel_compiles_for_sm90_without_spills_and_the_loads_first_kernels_wait_one_round_trip():
    pytest.importorskip("triton")
    table = _table()
    assert len(table) == 14
    for name, (registers, spills, trips, loops, sequence) in table.items():
        assert 0 < int(registers) <= 255 and int(spills) == 0 and sequence.count("L") > 0, name
    for name in ("enter (tower)", "out (DeltaNet)", "norm_proj (MoE block)", "down (MoE)"):
        assert table[name][2] == "1", (name, table[name][4])
    assert table["delta rule (prefill, per token)"][3] == "14"
    assert table["draw code (per search step)"][3] == "3+3"  # the top-k and the top-p searches
    one_warp = _table("--warps", "1", "--block-n", "4")
    assert one_warp["norm_gemv (DeltaNet in_proj)"][2] == "1"  # no block barrier at all in one warp
