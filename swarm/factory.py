"""Wires a Swarm for a target from the product parts: the knowledge base and engines repo under $SWARM_HOME,
the executor the target names (running the real evaluator) and the target's agents.
"""
from __future__ import annotations

from candidates import EngineRepo
from knowledge_base import KnowledgeStore
from targets import Target

from . import events as ev
from .agents import make_agents
from .executor import Executor, make_executor
from .loop import Swarm
from .paths import engines_path, kb_path


def open_kb(target: Target | None = None) -> KnowledgeStore:
    return KnowledgeStore(kb_path(target))


def open_repo() -> EngineRepo:
    return EngineRepo(engines_path())


def build_swarm(target: Target, listeners: list[ev.Listener] | None = None,
                executor: Executor | None = None) -> Swarm:
    return Swarm(target, kb=open_kb(target), repo=open_repo(), executor=executor or make_executor(target),
                 make_agents=lambda ledger: make_agents(target, ledger), listeners=listeners)
