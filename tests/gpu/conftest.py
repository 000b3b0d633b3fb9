"""GPU transform tests: `load_package(steps)` imports the reference package with transforms applied."""
from __future__ import annotations

import sys

import pytest
from gpu_engines import load_transformed


@pytest.fixture(scope="module")
def load_package(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    sys.path.insert(0, str(root))
    return lambda steps: load_transformed(steps, root)
