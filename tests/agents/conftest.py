"""Fixtures for the agent tests: the scripted LLM wire-protocol server, a small proposal context, and the
reference engine run that transformed engines are compared with."""
from __future__ import annotations

import pytest
from engine_copies import PackageLoader, ReferenceRun
from engine_copies import reference_run as make_reference_run
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



@pytest.fixture(scope="session")
def reference_run() -> ReferenceRun:
    return make_reference_run()


@pytest.fixture(scope="session")
def load_package(tmp_path_factory):
    """files -> the imported engine package (a fresh name each time, so modules never collide)."""
    loader = PackageLoader(tmp_path_factory.mktemp("engines"))
    yield loader
    loader.close()
