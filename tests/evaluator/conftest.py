"""Evaluator fixtures: a tiny CPU target with small trial counts, and one shared reference-vs-itself verdict."""
from __future__ import annotations

from pathlib import Path

import pytest

from evaluator import evaluate
from evaluator.sandbox import REFERENCE_DIR
from targets.schema import Target, load_target

REPO = Path(__file__).resolve().parents[2]


def tiny(target: Target, **timeouts: float) -> Target:
    """drama3_cpu.yaml cut to one prompt and a few frames, so a whole evaluation takes seconds on 2 cores."""
    bench = target.benchmark.model_copy(update={"prompts": target.benchmark.prompts[:1], "frames": 3,
                                                "warm_trials": 3, "warmup_trials": 1})
    return target.model_copy(update={
        "benchmark": bench,
        "tolerances": target.tolerances.model_copy(update={"prompts": 2, "frames": 3}),
        "timeouts": target.timeouts.model_copy(update={"build_s": 60, "correctness_s": 120, "benchmark_s": 120,
                                                       **timeouts}),
    })


@pytest.fixture(scope="session")
def tiny_target() -> Target:
    return tiny(load_target(REPO / "targets" / "drama3_cpu.yaml"))


@pytest.fixture(scope="session")
def self_verdict(tiny_target, tmp_path_factory):
    """The reference evaluated against itself, once per session."""
    return evaluate(REFERENCE_DIR, tiny_target, baseline_dir=REFERENCE_DIR,
                    work_dir=tmp_path_factory.mktemp("self_eval"), secret_seed=1234)
