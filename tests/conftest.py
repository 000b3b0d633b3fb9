"""Shared test setup: GPU tests skip without CUDA; every test gets a private SWARM_HOME."""
from __future__ import annotations

import pytest
import torch


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
