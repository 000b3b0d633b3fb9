"""Which judge produced a verdict: a digest of the evaluator's and the reference runtime's sources, and of the
target's fields that decide a verdict (model, hardware, benchmark, gates, time limits). A rejection by another
judge (a since-fixed check, another oracle, a gate the user has since corrected) is not the last word on an
engine proposed again."""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from targets.schema import Target

_ROOT = Path(__file__).resolve().parents[1]
_JUDGING_FIELDS = {"model", "hardware", "benchmark", "tolerances", "timeouts"}


def judge_version(target: Target) -> str:
    spec = target.model_dump_json(include=_JUDGING_FIELDS).encode()
    return f"{_sources_digest()}-{hashlib.sha256(spec).hexdigest()[:8]}"


@cache
def _sources_digest() -> str:
    digest = hashlib.sha256()
    for package in ("evaluator", "reference_runtime"):
        for path in sorted((_ROOT / package).rglob("*.py")):
            digest.update(f"{path.relative_to(_ROOT)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]
