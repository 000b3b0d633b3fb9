"""Builders shared by the loop tests: a small CPU target and a Swarm wired with the fakes."""
from __future__ import annotations

from pathlib import Path

from swarm_fakes import FakeAgent, FakeEvaluator, fake_calibrate

from candidates import EngineRepo
from knowledge_base import KnowledgeStore
from swarm.executor import LocalExecutor
from swarm.loop import Swarm
from swarm.paths import engines_path, kb_path
from targets import Target, load_target

CPU_TARGET = Path(__file__).resolve().parents[2] / "targets" / "drama3_cpu.yaml"


def small_target(name: str = "fake-cpu", **changes) -> Target:
    """drama3_cpu with `changes` merged one level deep (e.g. budget={"iterations": 2})."""
    data = load_target(CPU_TARGET).model_dump()
    data.update(name=name, agents=[{"provider": "offline"}], candidates_per_iteration=2, acceptance={})
    data["budget"] = {"iterations": 2, "wall_minutes": 10}
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return Target.model_validate(data)


def fake_swarm(target: Target, agents: list[FakeAgent], evaluator: FakeEvaluator | None = None,
               listeners=None, calibrate=fake_calibrate) -> Swarm:
    return Swarm(target, kb=KnowledgeStore(kb_path(target)), repo=EngineRepo(engines_path()),
                 executor=LocalExecutor(target, evaluator or FakeEvaluator(), calibrate),
                 make_agents=lambda ledger: [a.bind(ledger) for a in agents], listeners=listeners)
