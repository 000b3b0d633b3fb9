"""The proposers: LLM agents over the official SDKs and the offline transform proposer.

`make_agents(target, ledger)` builds the target's agents, one per copy (`count`), each with a distinct name.
"""
from __future__ import annotations

from targets.schema import AgentSpec, Target

from .base import Agent, AgentError, AgentExhausted, BudgetExceeded
from .ledger import CostLedger
from .offline import OfflineAgent

__all__ = ["Agent", "AgentError", "AgentExhausted", "BudgetExceeded", "CostLedger", "make_agents"]


def make_agents(target: Target, ledger: CostLedger) -> list[Agent]:
    """One agent per copy of every AgentSpec; an LLM agent without its API key is an AgentError naming the
    environment variable to set."""
    agents: list[Agent] = []
    for spec in target.agents:
        for copy in range(spec.count):
            name = _unique_name(_base_name(spec, copy), {a.name for a in agents})
            agents.append(_make(spec, name, ledger))
    return agents


def _make(spec: AgentSpec, name: str, ledger: CostLedger) -> Agent:
    if spec.provider == "offline":
        return OfflineAgent(name)
    if spec.model == "offline":
        raise AgentError(f"agent {name}: provider {spec.provider} needs a model name "
                         "(e.g. model: claude-sonnet-4-5 or model: gpt-5) in the target's agents")
    # SDKs are imported only for the providers a target uses, so offline runs need neither (e.g. on a GPU box
    # whose image lacks them).
    if spec.provider == "anthropic":
        from .anthropic_agent import AnthropicAgent

        return AnthropicAgent(name, spec, ledger)
    from .openai_agent import OpenAIAgent

    return OpenAIAgent(name, spec, ledger)


def _base_name(spec: AgentSpec, copy: int) -> str:
    return f"offline-{copy}" if spec.provider == "offline" else f"{spec.provider}-{spec.model}-{copy}"


def _unique_name(name: str, taken: set[str]) -> str:
    suffix, candidate = 1, name
    while candidate in taken:
        suffix += 1
        candidate = f"{name}.{suffix}"
    return candidate
