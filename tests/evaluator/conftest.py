"""Evaluator fixtures: a tiny CPU target with small trial counts, and one shared reference-vs-itself verdict."""
from __future__ import annotations

import pytest

from evaluator import evaluate
from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from targets.schema import Target, load_target
from tests.evaluator.candidate_factory import small_target


@pytest.fixture(scope="session")
def tiny_target() -> Target:
    return small_target(load_target(REPO_ROOT / "targets" / "drama3_cpu.yaml"))


@pytest.fixture(scope="session")
def self_verdict(tiny_target, tmp_path_factory):
    """The reference evaluated against itself, once per session."""
    return evaluate(REFERENCE_DIR, tiny_target, baseline_dir=REFERENCE_DIR,
                    work_dir=tmp_path_factory.mktemp("self_eval"), secret_seed=1234)
