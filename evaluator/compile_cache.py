"""Compile caches carried from one evaluation to the next, per baseline engine.

Every worker compiles in its private tmp (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR: confine.py), which is wiped
with it, so each evaluation rebuilt its baseline cold: on the H200 the baseline's build was a third of an
evaluation (104 of 304 s, session 15), and the candidate, which shares most kernels with that baseline, paid
the same compiles again. Here a baseline worker that built and served a whole evaluation leaves its caches as the
seed of its engine (keyed by the package's files and the judge's torch); the next evaluations against that
baseline copy the seed into each worker's tmp before it starts, the candidate's included.

Only trusted workers (a baseline: the reference or a kept engine, which passed the cascade) write a seed, and
only once; a worker gets a copy, so nothing it writes reaches the seed. The caches' own keys (kernel source,
compiler and device versions) decide what a worker may reuse, as within one process.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from pathlib import Path

import torch

CACHE_DIRS = (".triton", ".inductor")  # under a worker's tmp, as confine._home names them
KEPT_SEEDS = 8  # the most recently used seeds stay; older ones are removed when a new one is written
STALE_PARTIAL_S = 3600
MAX_SEED_BYTES = 2 << 30  # a larger cache is not kept (the H200 engines' Triton and inductor caches are far smaller)


def seed_key(package_dir: Path) -> str:
    """The engine package's Python files and the torch that compiles them."""
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(f"\0{path.relative_to(package_dir)}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class CompileCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def seed(self, package_dir: Path) -> Path:
        return self.root / seed_key(package_dir)

    def plant(self, seed: Path, tmp: Path, uid: int | None) -> bool:
        """Copy the seed's caches into a worker's tmp (owned by the worker's uid); False when there is none."""
        if not seed.is_dir():
            return False
        os.utime(seed)  # used: kept longer
        for name in CACHE_DIRS:
            if (seed / name).is_dir():
                shutil.copytree(seed / name, tmp / name)
        if uid is not None:
            for name in CACHE_DIRS:
                for root, dirs, files in os.walk(tmp / name):
                    for entry in (root, *(os.path.join(root, n) for n in dirs + files)):
                        os.lchown(entry, uid, uid)
        return True

    def harvest(self, tmp: Path, seed: Path) -> None:
        """A trusted worker's caches as the seed, unless one exists: regular files only (no link, FIFO or device
        file leaves a worker's tmp), written aside and renamed into place, so a judge killed mid-copy leaves no
        half seed."""
        files = [f for name in CACHE_DIRS for f in _regular_files(tmp / name)]
        if seed.exists() or not files or sum(size for _, size in files) > MAX_SEED_BYTES:
            return
        partial = self.root / f".{seed.name}.{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        for path, _ in files:
            dest = partial / path.relative_to(tmp)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest, follow_symlinks=False)
        try:
            partial.rename(seed)
        except OSError:  # another evaluation wrote it first
            shutil.rmtree(partial, ignore_errors=True)
            return
        entries = list(self.root.iterdir())
        seeds = sorted((p for p in entries if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime)
        # and what judges killed mid-copy left aside (a copy takes seconds)
        stale = [p for p in entries if p.name.startswith(".") and p.stat().st_mtime < time.time() - STALE_PARTIAL_S]
        for old in seeds[:-KEPT_SEEDS] + stale:
            shutil.rmtree(old, ignore_errors=True)


def _regular_files(folder: Path) -> list[tuple[Path, int]]:
    found = []
    for root, _, names in os.walk(folder):  # does not follow links to directories
        for name in names:
            info = os.lstat(path := Path(root, name))
            if stat.S_ISREG(info.st_mode):
                found.append((path, info.st_size))
    return found
