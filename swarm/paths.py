"""Where a swarm keeps its state: $SWARM_HOME (default ~/.swarm) holds kb.sqlite, engines/, runs/, nightly/ and
compile_cache/."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from targets import Target


def swarm_home() -> Path:
    return Path(os.environ.get("SWARM_HOME") or Path.home() / ".swarm")


def kb_path(target: Target | None = None) -> Path:
    if target is not None and target.kb_path:
        return Path(target.kb_path).expanduser()
    return swarm_home() / "kb.sqlite"


def engines_path() -> Path:
    return swarm_home() / "engines"


def run_dir(run_id: str) -> Path:
    return swarm_home() / "runs" / run_id


def nightly_dir() -> Path:
    return swarm_home() / "nightly"


def compile_cache_path() -> Path:
    """The baselines' compile caches that later evaluations start from (evaluator/compile_cache.py)."""
    return swarm_home() / "compile_cache"


def reference_engine_dir(target: Target) -> Path:
    """The forkable engine package of the target's reference runtime (`<package>/model/`), found without
    importing the package."""
    spec = importlib.util.find_spec(target.model.reference_runtime)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"target {target.name}: model.reference_runtime {target.model.reference_runtime!r} "
                                "is not an importable package; run from the repository root or `pip install -e .`")
    return Path(next(iter(spec.submodule_search_locations))) / "model"
