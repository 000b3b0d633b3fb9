"""Which judge produced a verdict: a digest of the evaluator's and the reference runtime's sources, and of the
target's fields that decide a verdict (model, hardware, benchmark, gates, time limits). A rejection by another
judge (a since-fixed check, another oracle, a gate the user has since corrected) is not the last word on an
engine proposed again. Which benchmark an A/A band was measured with: a band from other trials or another
streaming schedule is no noise floor for these."""
from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from targets.schema import Target

_ROOT = Path(__file__).resolve().parents[1]
_JUDGING_FIELDS = {"model", "hardware", "benchmark", "tolerances", "timeouts"}
_DECISION_FIELDS = {"min_speedup", "max_plausible_speedup", "confidence"}  # read from the band, not measured in it


def judge_version(target: Target) -> str:
    spec = target.model_dump_json(include=_JUDGING_FIELDS).encode()
    return f"{_sources_digest()}-{hashlib.sha256(spec).hexdigest()[:8]}"


def benchmark_protocol(target: Target) -> str:
    """The benchmark settings that shape what an A/A band measures: model, hardware, prompts, trial counts and
    lengths, the streaming schedule."""
    spec = target.model_dump_json(include={"model": True, "hardware": True,
                                           "benchmark": set(type(target.benchmark).model_fields) - _DECISION_FIELDS})
    return hashlib.sha256(spec.encode()).hexdigest()[:12]


@cache
def _sources_digest() -> str:
    digest = hashlib.sha256()
    for package in ("evaluator", "reference_runtime"):
        for path in sorted((_ROOT / package).rglob("*.py")):
            digest.update(f"{path.relative_to(_ROOT)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]
