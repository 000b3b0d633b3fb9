"""Shared test setup: GPU tests skip without CUDA; every test gets a private SWARM_HOME."""
from __future__ import annotations

import os

# Tiny-model ops are too small to gain from threads; on 2 shared cores, oversubscribed threads stall each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _swarm_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_HOME", str(tmp_path / "swarm_home"))
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
