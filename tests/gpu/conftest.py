"""GPU transform tests: `load_package(steps)` imports the reference package with transforms applied."""
from __future__ import annotations

import os
import sys

import pytest
from gpu_engines import load_transformed

from evaluator.sandbox import CUBLAS_REPRODUCIBLE

# as in the evaluator's workers: the tests compare streams of engines that run graphs on two CUDA streams frame for
# frame, which cuBLAS keeps reproducible only with this set before its first call
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_REPRODUCIBLE)


@pytest.fixture(scope="module")
def load_package(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    sys.path.insert(0, str(root))
    return lambda steps: load_transformed(steps, root)
