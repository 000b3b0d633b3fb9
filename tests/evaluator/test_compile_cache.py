"""Compile caches carried between evaluations (evaluator/compile_cache.py): a trusted worker's caches become its
engine's seed once, holding regular files only; the next worker against that engine starts with a copy."""
from __future__ import annotations

import os
from pathlib import Path

from evaluator.compile_cache import KEPT_SEEDS, CompileCache, seed_key
from evaluator.sandbox import Deadline, Pool
from tests.evaluator.candidate_factory import build_engine_body, make_candidate

MARKER_BODY = '''
import os, pathlib
cache = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
print("SEEDED", (cache / "kernel.py").exists(), flush=True)
cache.mkdir(parents=True, exist_ok=True)
(cache / "kernel.py").write_text("compiled once")
'''


def _worker_tmp(tmp_path: Path) -> Path:
    tmp = tmp_path / "worker_tmp"
    (tmp / ".triton" / "ab").mkdir(parents=True)
    (tmp / ".triton" / "ab" / "kernel.cubin").write_bytes(b"\x7fELF")
    (tmp / ".inductor").mkdir()
    (tmp / ".inductor" / "graph.py").write_text("def call(): ...")
    (tmp / ".inductor" / "secret").symlink_to("/etc/hostname")
    os.mkfifo(tmp / ".inductor" / "pipe")
    (tmp / "elsewhere.txt").write_text("not a cache")
    return tmp


def test_a_seed_holds_the_caches_regular_files_once_and_plants_a_copy(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    worker_tmp = _worker_tmp(tmp_path)
    seed = cache.root / "key"
    assert not cache.plant(seed, tmp_path / "empty", None)
    cache.harvest(worker_tmp, seed)
    kept = sorted(str(p.relative_to(seed)) for p in seed.rglob("*") if p.is_file())
    assert kept == [".inductor/graph.py", ".triton/ab/kernel.cubin"]  # no link, FIFO or file outside the caches
    (worker_tmp / ".inductor" / "graph.py").write_text("another build")
    cache.harvest(worker_tmp, seed)  # a seed is written once
    assert (seed / ".inductor" / "graph.py").read_text() == "def call(): ..."
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert cache.plant(seed, fresh, None)
    (fresh / ".inductor" / "graph.py").write_text("the worker's own write")
    assert (seed / ".inductor" / "graph.py").read_text() == "def call(): ..."


def test_only_the_most_recently_used_seeds_stay(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    worker_tmp = _worker_tmp(tmp_path)
    for i in range(KEPT_SEEDS):
        cache.harvest(worker_tmp, cache.root / f"seed{i}")
        os.utime(cache.root / f"seed{i}", (i, i))
    (tmp_path / "planted").mkdir()
    assert cache.plant(cache.root / "seed0", tmp_path / "planted", None)  # used now: the newest
    killed, copying = cache.root / ".seedx.123", cache.root / ".seedy.456"  # a killed judge's copy, one going on
    for partial in (killed, copying):
        partial.mkdir()
    os.utime(killed, (0, 0))
    cache.harvest(worker_tmp, cache.root / "newest")
    left = {p.name for p in cache.root.iterdir()}
    assert left == {f"seed{i}" for i in (0, *range(2, KEPT_SEEDS))} | {"newest", copying.name}


def test_the_key_follows_the_package_files(tmp_path):
    a = make_candidate(tmp_path, name="a")
    b = make_candidate(tmp_path, name="b")
    assert seed_key(a) == seed_key(b)
    (b / "tower.py").write_text((b / "tower.py").read_text() + "\n# changed\n")
    assert seed_key(a) != seed_key(b)


def test_a_baselines_second_worker_starts_from_the_first_ones_caches(tiny_target, tmp_path):
    package = make_candidate(tmp_path, files=build_engine_body(MARKER_BODY))
    cache = CompileCache(tmp_path / "cache")
    seen = []
    for run in range(2):
        pool = Pool(tiny_target, tmp_path / f"work{run}", None, (cache, cache.seed(package)))
        worker = pool.start("baseline", package)
        try:
            pool.use(worker).ready(Deadline.after(120, "build"))
            seen.append((worker.seeded, "SEEDED True" in worker.log_tail()))
        finally:
            pool.close(trusted=worker)
    assert seen == [(False, False), (True, True)]
    assert (cache.seed(package) / ".inductor" / "kernel.py").read_text() == "compiled once"
