"""scripts/prompt_build_bench.py stays runnable: a short run prints a row per benchmark prompt with its three
timings."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "prompt_build_bench.py"


def test_prints_each_prompt_warm_after_idle_and_in_a_stream():
    done = subprocess.run([sys.executable, str(SCRIPT), "--config", "drama3-tiny", "--calls", "3", "--streams", "1",
                           "--idle-ms", "5"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[2:]}
    assert sorted(rows) == ["hello", "sentences", "voice"]
    assert all(len(v) == 3 and all(float(x) > 0 for x in v) for v in rows.values())
