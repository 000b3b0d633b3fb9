"""scripts/device_swarm.sh, the swarm split over time-limited leases, run on CPU: a fresh run stopped by its time
limit packs a state that the next call resumes from."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _call(tmp_path: Path, name: str, *args: str, caches: Path | None = None,
          cap: int = 15 << 20) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / name
    out.mkdir()
    env = os.environ | {"OUT": str(out), "SWARM_DEVICE_HOME": str(tmp_path / "home"), "COLUMNS": "200",
                        "SWARM_COMPILE_CACHE": str(caches or tmp_path / "no_caches.tgz"),
                        "SWARM_COMPILE_CACHE_BYTES": str(cap)}
    done = subprocess.run(["bash", "scripts/device_swarm.sh", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    return done, out


def test_a_time_limited_call_packs_a_state_the_next_call_resumes(tmp_path):
    first, out = _call(tmp_path, "out1", "fresh", "12", "targets/drama3_cpu.yaml")
    assert first.returncode == 124, first.stdout + first.stderr
    log = (out / "swarm.log").read_text()
    assert "started drama3-cpu-001" in log and "interrupted" in log, log
    with tarfile.open(out / "swarm_home.tgz") as packed:
        names = packed.getnames()
    assert "swarm_home/kb.sqlite" in names and "swarm_home/runs/drama3-cpu-001/events.jsonl" in names, names
    assert not any("/work/" in n for n in names)  # evaluator scratch stays behind

    second, out = _call(tmp_path, "out2", str(tmp_path / "out1" / "swarm_home.tgz"), "8",
                        "targets/drama3_cpu.yaml", "--resume", "drama3-cpu-001")
    assert second.returncode == 124, second.stdout + second.stderr
    assert "resumed drama3-cpu-001" in (out / "swarm.log").read_text()


def test_the_compile_caches_travel_apart_and_come_back(tmp_path):
    seed = tmp_path / "packed" / "compile_cache" / "0123abcd" / "triton"
    seed.mkdir(parents=True)
    (seed / "kernel.cubin").write_bytes(b"cubin")
    with tarfile.open(tmp_path / "caches.tgz", "w:gz") as packed:
        packed.add(tmp_path / "packed" / "compile_cache", arcname="compile_cache")
    done, out = _call(tmp_path, "out", "fresh", "6", "targets/drama3_cpu.yaml", caches=tmp_path / "caches.tgz")
    assert done.returncode == 124, done.stdout + done.stderr
    with tarfile.open(out / "compile_cache.tgz") as packed:
        assert "compile_cache/0123abcd/triton/kernel.cubin" in packed.getnames()


def test_only_the_newest_seeds_that_fit_come_back(tmp_path):
    """$OUT's files come back up to 16 MiB each: the seeds an evaluation used last, while the archive fits."""
    packed = tmp_path / "packed" / "compile_cache"
    for age, name in enumerate(("newest", "older", "oldest")):
        (packed / name / ".triton").mkdir(parents=True)
        (packed / name / ".triton" / "kernel.cubin").write_bytes(os.urandom(3000))  # incompressible
        os.utime(packed / name, (1e9 - age, 1e9 - age))
    with tarfile.open(tmp_path / "caches.tgz", "w:gz") as archive:
        archive.add(packed, arcname="compile_cache")
    done, out = _call(tmp_path, "out", "fresh", "6", "targets/drama3_cpu.yaml", caches=tmp_path / "caches.tgz",
                      cap=7500)
    assert done.returncode == 124, done.stdout + done.stderr
    with tarfile.open(out / "compile_cache.tgz") as archive:
        seeds = {n.split("/")[1] for n in archive.getnames() if n.count("/") >= 1}
    assert seeds == {"newest", "older"} and "compile caches packed: 2 of 3 seeds" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["compile_cache.tgz", "swarm.log", "swarm_home.tgz"]


def test_bad_usage_exits_2():
    done = subprocess.run(["bash", "scripts/device_swarm.sh", "fresh"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "usage:" in done.stderr
