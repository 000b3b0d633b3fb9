"""Fixtures for the agent tests: the scripted LLM wire-protocol server and a small proposal context."""
from __future__ import annotations

import pytest

from llm_server import ScriptedLLMServer
from swarm.proposal import ProposalContext

PARENT_FILES = {
    "moe.py": "def moe(x, experts):\n    out = 0\n    for e in experts:\n        out = out + e(x)\n    return out\n",
    "__init__.py": "from .moe import moe\n",
}


@pytest.fixture
def llm_server():
    server = ScriptedLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def context() -> ProposalContext:
    return ProposalContext(target_name="drama3-cpu", model_config_name="drama3-tiny", device="cpu", gpu=None,
                           parent_id="reference", parent_files=dict(PARENT_FILES),
                           parent_figures="frames/s p50 40.0", acceptance="speedup >= 1.5")


# ---- engines built from transformed copies of the reference engine package (drama3-tiny, CPU)

import importlib  # noqa: E402
import itertools  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import reference_runtime.model as reference_model  # noqa: E402
from candidates.repo import engine_files, write_files  # noqa: E402
from reference_runtime.api import TTSRequest  # noqa: E402
from reference_runtime.config import get_config  # noqa: E402
from reference_runtime.prompt import build_rows  # noqa: E402
from reference_runtime.teacher_forcing import ForcedLogits, teacher_forced  # noqa: E402
from reference_runtime.weights import init_weights  # noqa: E402

TINY = get_config("drama3-tiny")
REQUEST = TTSRequest(text="Hello there, fox.", max_frames=8, ignore_eos=True, seed=3)
_package_ids = itertools.count()


@dataclass(frozen=True)
class ReferenceRun:
    files: dict[str, str]
    weights: dict[str, torch.Tensor]
    frames: torch.Tensor  # free-running frames of REQUEST
    rows: torch.Tensor
    logits: ForcedLogits  # teacher-forced on `frames`


@pytest.fixture(scope="session")
def reference_run() -> ReferenceRun:
    weights = init_weights(TINY, seed=0, device="cpu")
    engine = reference_model.build_engine(TINY, weights, torch.device("cpu"))
    frames = engine.generate(REQUEST).frames
    rows = build_rows(TINY, REQUEST)
    return ReferenceRun(engine_files(Path(reference_model.__file__).parent), weights, frames, rows,
                        teacher_forced(engine, rows, frames))


@pytest.fixture(scope="session")
def load_package(tmp_path_factory):
    """files -> the imported engine package (a fresh name each time, so modules never collide)."""
    root = tmp_path_factory.mktemp("engines")
    import sys

    sys.path.insert(0, str(root))

    def load(files: dict[str, str]):
        name = f"transformed_engine_{next(_package_ids)}"
        write_files(files, root / name)
        return importlib.import_module(name)

    yield load
    sys.path.remove(str(root))
