"""make_agents: one agent per copy with distinct names; LLM agents need their key (or a local base_url)."""
from __future__ import annotations

import pytest

from swarm.agents import Agent, AgentError, CostLedger, make_agents
from swarm.agents.anthropic_agent import AnthropicAgent
from swarm.agents.offline import OfflineAgent
from swarm.agents.openai_agent import OpenAIAgent
from targets import load_target
from targets.schema import AgentSpec

CPU_TARGET = load_target("targets/drama3_cpu.yaml")


def target_with(*agents: AgentSpec):
    return CPU_TARGET.model_copy(update={"agents": list(agents)})


def test_offline_agents_need_no_key():
    agents = make_agents(target_with(AgentSpec(provider="offline", count=2)), CostLedger())
    assert [a.name for a in agents] == ["offline-0", "offline-1"]
    assert all(isinstance(a, OfflineAgent) and isinstance(a, Agent) for a in agents)


def test_copies_and_providers_get_distinct_names(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    agents = make_agents(target_with(AgentSpec(provider="anthropic", model="claude-sonnet-4-5", count=2),
                                     AgentSpec(provider="anthropic", model="claude-sonnet-4-5"),
                                     AgentSpec(provider="openai", model="qwen3-coder",
                                               base_url="http://127.0.0.1:1/v1")),
                         CostLedger())
    assert [a.name for a in agents] == ["anthropic-claude-sonnet-4-5-0", "anthropic-claude-sonnet-4-5-1",
                                        "anthropic-claude-sonnet-4-5-0.2", "openai-qwen3-coder-0"]
    assert isinstance(agents[0], AnthropicAgent) and isinstance(agents[-1], OpenAIAgent)


@pytest.mark.parametrize("provider, model, env", [("anthropic", "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
                                                   ("openai", "gpt-5", "OPENAI_API_KEY")])
def test_llm_agent_without_a_key_names_the_variable(provider, model, env):
    with pytest.raises(AgentError, match=f"set {env}"):
        make_agents(target_with(AgentSpec(provider="offline"), AgentSpec(provider=provider, model=model)),
                    CostLedger())


def test_llm_agent_needs_a_model_name(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(AgentError, match="needs a model name"):
        make_agents(target_with(AgentSpec(provider="openai")), CostLedger())


def test_agents_share_the_ledger(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    ledger = CostLedger(cap_usd=1.0)
    agents = make_agents(target_with(AgentSpec(provider="openai", model="gpt-5", count=2)), ledger)
    assert all(a.ledger is ledger for a in agents)
