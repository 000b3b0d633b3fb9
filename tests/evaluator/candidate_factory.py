"""Candidate engines for evaluator tests: a copy of the reference engine package with text edits applied.

    make_candidate(tmp_path, {"tower.py": (old, new)})            # edit a reference file (old must occur once)
    make_candidate(tmp_path, files={"__init__.py": "raise ..."})  # replace or add whole files
    small_target(load_target("targets/drama3_cpu.yaml"))          # few prompts, frames and trials
"""
from __future__ import annotations

import shutil
from pathlib import Path

from evaluator.sandbox import REFERENCE_DIR
from targets.schema import Target


Edit = tuple[str, str]


def make_candidate(tmp_path: Path, edits: dict[str, Edit | list[Edit]] | None = None,
                   files: dict[str, str] | None = None, name: str = "candidate") -> Path:
    """A candidate directory under tmp_path: the reference package, then `edits` (filename -> (old, new), or a
    list of them applied in turn; each `old` must occur exactly once), then `files` (filename -> full content)."""
    dest = tmp_path / name
    shutil.copytree(REFERENCE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for filename, spec in (edits or {}).items():
        path = dest / filename
        text = path.read_text()
        for old, new in [spec] if isinstance(spec, tuple) else spec:
            if text.count(old) != 1:
                raise ValueError(f"make_candidate: {filename} contains {text.count(old)} copies of {old!r}, need "
                                 "exactly 1; quote a longer, unique piece of the reference")
            text = text.replace(old, new)
        path.write_text(text)
    for filename, content in (files or {}).items():
        (dest / filename).write_text(content)
    return dest


def build_engine_body(body: str) -> dict[str, str]:
    """`files=` for a candidate whose build_engine runs `body` (indented Python) before building the reference."""
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    init = (REFERENCE_DIR / "__init__.py").read_text()
    marker = "    device = torch.device(device)\n"
    if init.count(marker) != 1:
        raise ValueError(f"build_engine_body: {marker.strip()!r} not found once in the reference __init__.py")
    return {"__init__.py": init.replace(marker, indented + "\n" + marker)}


def small_target(target: Target, **timeouts: float) -> Target:
    """`target` cut to one prompt, 3 frames and 3 warm trials (a whole drama3-tiny evaluation then takes seconds
    on 2 cores); `timeouts` override StageTimeouts fields, e.g. build_s=6."""
    bench = target.benchmark.model_copy(update={"prompts": target.benchmark.prompts[:1], "frames": 3,
                                                "warm_trials": 3, "warmup_trials": 1})
    return target.model_copy(update={
        "benchmark": bench,
        "tolerances": target.tolerances.model_copy(update={"prompts": 2, "frames": 3}),
        "timeouts": target.timeouts.model_copy(update={"build_s": 60, "correctness_s": 120, "benchmark_s": 120,
                                                       **timeouts}),
    })
