"""scripts/gpu_codec_profile.py stays runnable on a machine without a GPU (its --device cpu dry run at
drama3-tiny), and what it writes says per window length how long a decode took and which ops it ran."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_dry_run_profiles_each_window_length(tmp_path):
    out = tmp_path / "codec.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_codec_profile.py"), "--out", str(out),
                           "--device", "cpu", "--lengths", "1,3", "--replays", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    windows = json.loads(out.read_text())["windows"]
    assert [w["frames"] for w in windows] == [1, 3]
    for w in windows:
        assert w["wall_ms"] > 0 and w["launches"] > 10 and w["top"] and w["top"][0][1] > 0
    assert "3-frame window" in done.stdout
