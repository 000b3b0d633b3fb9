"""The whole loop on drama3_cpu with LLM agents over both real SDKs, answering from the scripted local server,
and the real evaluator: a good edit, a wrong one, a cheating one and one that never compiles each land with
the right verdict and lesson (one iteration, tiny trial counts)."""
from __future__ import annotations

import json

import pytest
from engine_copies import REFERENCE_FILES
from llm_server import Reply

from knowledge_base import KnowledgeStore
from knowledge_base.transforms import TRANSFORMS
from swarm.factory import build_swarm
from swarm.paths import kb_path
from targets import load_target
from targets.schema import AgentSpec
from tests.evaluator.candidate_factory import small_target


def answer(title: str, *blocks: tuple[str, str, str]) -> str:
    body = "".join(f"{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n\n"
                   for path, search, replace in blocks)
    return f"TITLE: {title}\nWhy: see the edits.\n\n{body}"


GOOD = answer("dequantise experts once", *((p.path, p.search, p.replace)
                                           for p in TRANSFORMS["fp8_dequant_at_build"].apply(REFERENCE_FILES, {})))
WRONG = answer("scale the main logits", ("backbone.py", "        return F.linear(hidden, self.lm_head).float()\n",
                                         "        return F.linear(hidden, self.lm_head).float() * 1.01\n"))
CHEAT = answer("faster clock", ("__init__.py", "import torch\n",
                                "import time\n\nimport torch\n\ntime.perf_counter = time.process_time\n"))
NO_COMPILE = answer("typo", ("__init__.py", "import torch\n", "import torch(\n"))
UNMATCHED = WRONG.replace("self.lm_head).float()\n=", "self.lm_head)\n=")


@pytest.fixture
def llm_target(llm_server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    base = small_target(load_target("targets/drama3_cpu.yaml"))
    return base.model_copy(update={
        "name": "llm-cpu",
        "budget": base.budget.model_copy(update={"iterations": 1, "wall_minutes": 10, "dollars": 5.0}),
        "acceptance": base.acceptance.model_copy(update={"speedup": None}),
        "candidates_per_iteration": 2,
        "agents": [AgentSpec(provider="anthropic", model="claude-sonnet-4-5", base_url=llm_server.anthropic_url),
                   AgentSpec(provider="openai", model="gpt-4o", base_url=llm_server.openai_url)],
    })


def test_scripted_llm_answers_land_with_their_verdicts_and_lessons(llm_server, llm_target):
    # Slots 0-1 belong to the Anthropic agent, 2-3 to the OpenAI agent.
    llm_server.route("proposal slot 0", Reply(GOOD, input_tokens=20_000, output_tokens=800))
    llm_server.route("proposal slot 1", Reply(NO_COMPILE), Reply(NO_COMPILE))
    llm_server.route("proposal slot 2", Reply(CHEAT))
    llm_server.route("proposal slot 3", Reply(UNMATCHED), Reply(WRONG))
    with build_swarm(llm_target) as swarm:
        outcome = swarm.start()

    kb = KnowledgeStore(kb_path(llm_target))
    by_slot = {c.slot: c for c in kb.candidates(outcome.run_id)}
    status = {slot: kb.verdict(c.id).status for slot, c in by_slot.items()}
    assert status[0] in ("pass", "slower", "noisy"), kb.verdict(by_slot[0].id).summary
    assert status[1] == "agent_error" and "does not compile" in kb.verdict(by_slot[1].id).summary
    assert status[2] == "cheat_suspected"
    assert status[3] == "mismatch"
    lessons = {lesson.candidate_id: lesson for lesson in kb.lessons()}
    assert by_slot[1].id not in lessons  # an agent failure teaches nothing about the engine
    assert lessons[by_slot[2].id].outcome == lessons[by_slot[3].id].outcome == "failed"
    assert lessons[by_slot[0].id].feature == "fp8_moe"
    assert by_slot[0].cost_usd == pytest.approx(20_000 * 3e-6 + 800 * 15e-6)
    assert json.loads(by_slot[3].proposal_json)["agent"].startswith("openai-gpt-4o")
    assert len(llm_server.requests) == 6  # two repair turns
