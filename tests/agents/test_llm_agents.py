"""The Anthropic and OpenAI agents, driven through the real SDK clients against the scripted local server."""
from __future__ import annotations

import logging

import pytest
from llm_server import Reply

from swarm.agents import AgentError, BudgetExceeded, CostLedger
from swarm.agents.anthropic_agent import AnthropicAgent
from swarm.agents.llm import CHARS_PER_TOKEN, REPAIR_TOKENS, RetryPolicy
from swarm.agents.openai_agent import OpenAIAgent
from swarm.edits import apply_edits
from targets.schema import AgentSpec

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05)

GOOD = """TITLE: sum experts with a generator
One pass over the experts instead of rebinding out each time.

moe.py
<<<<<<< SEARCH
    out = 0
    for e in experts:
        out = out + e(x)
    return out
=======
    return sum(e(x) for e in experts)
>>>>>>> REPLACE
"""
UNMATCHED = GOOD.replace("    for e in experts:", "    for expert in experts:")
BROKEN_SYNTAX = GOOD.replace("return sum(e(x) for e in experts)", "return sum(e(x) for e in experts")
CHEAT = """TITLE: remember outputs
Cache outputs by input.

moe.py
<<<<<<< SEARCH
def moe(x, experts):
=======
_SEEN = {}


def moe(x, experts):
    if id(x) in _SEEN:
        return _SEEN[id(x)]
>>>>>>> REPLACE
"""


def make(provider: str, server, ledger=None, model: str | None = None, **spec) -> AnthropicAgent | OpenAIAgent:
    ledger = ledger if ledger is not None else CostLedger()
    if provider == "anthropic":
        agent_spec = AgentSpec(provider="anthropic", model=model or "claude-sonnet-4-5",
                               base_url=server.anthropic_url, max_tokens=1000, **spec)
        return AnthropicAgent("anthropic-0", agent_spec, ledger, FAST_RETRY)
    agent_spec = AgentSpec(provider="openai", model=model or "gpt-4o", base_url=server.openai_url, max_tokens=1000,
                           **spec)
    return OpenAIAgent("openai-0", agent_spec, ledger, FAST_RETRY)


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-openai-key")


PROVIDERS = pytest.mark.parametrize("provider", ["anthropic", "openai"])


@PROVIDERS
def test_good_answer_becomes_a_proposal_with_usage_and_cost(provider, llm_server, context):
    llm_server.push(Reply(GOOD, input_tokens=2000, output_tokens=300))
    ledger = CostLedger()
    proposal = make(provider, llm_server, ledger).propose(context)
    assert proposal.title == "sum experts with a generator"
    assert proposal.rationale == "One pass over the experts instead of rebinding out each time."
    assert "return sum(e(x) for e in experts)" in apply_edits(context.parent_files, proposal.edits)["moe.py"]
    assert (proposal.input_tokens, proposal.output_tokens) == (2000, 300)
    expected = {"anthropic": 2000 * 3e-6 + 300 * 15e-6, "openai": 2000 * 2.5e-6 + 300 * 10e-6}[provider]
    assert proposal.cost_usd == pytest.approx(expected)
    assert ledger.spent_usd == pytest.approx(expected) and ledger.output_tokens == 300


def test_requests_carry_the_prompt_model_and_limits(llm_server, context):
    llm_server.push(Reply(GOOD), Reply(GOOD))
    make("anthropic", llm_server).propose(context)
    make("openai", llm_server).propose(context)
    anthropic_body, openai_body = (r.body for r in llm_server.requests)
    assert anthropic_body["model"] == "claude-sonnet-4-5" and anthropic_body["max_tokens"] == 1000
    assert "Engine contract" in anthropic_body["system"]
    prompt = anthropic_body["messages"][0]["content"]
    assert "drama3-tiny" in prompt and "for e in experts:" in prompt and "speedup >= 1.5" in prompt
    assert openai_body["messages"][0]["role"] == "system" and openai_body["max_tokens"] == 1000
    assert openai_body["messages"][1]["content"] == prompt


@PROVIDERS
def test_unmatched_search_is_fed_back_once_and_repaired(provider, llm_server, context):
    llm_server.push(Reply(UNMATCHED, input_tokens=100, output_tokens=10),
                    Reply(GOOD, input_tokens=150, output_tokens=20))
    proposal = make(provider, llm_server).propose(context)
    assert proposal.title == "sum experts with a generator"
    assert (proposal.input_tokens, proposal.output_tokens) == (250, 30)
    repair_turn = llm_server.requests[1].body["messages"]
    assert repair_turn[-2] == {"role": "assistant", "content": UNMATCHED}
    feedback = repair_turn[-1]["content"]
    assert "edit block 1 (moe.py): SEARCH does not match" in feedback and "3|     for e in experts:" in feedback


@PROVIDERS
def test_answer_still_broken_after_the_repair_turn_is_an_agent_error(provider, llm_server, context):
    llm_server.push(Reply(BROKEN_SYNTAX), Reply(BROKEN_SYNTAX))
    with pytest.raises(AgentError, match="after one repair turn: moe.py: the edited file does not compile"):
        make(provider, llm_server).propose(context)
    assert len(llm_server.requests) == 2


def test_truncated_answer_is_explained_in_the_repair_turn(llm_server, context):
    llm_server.push(Reply(GOOD[:200], truncated=True), Reply(GOOD))
    make("openai", llm_server).propose(context)
    assert "cut off at the max_tokens limit" in llm_server.requests[1].body["messages"][-1]["content"]


@PROVIDERS
def test_cheating_edit_is_not_the_agents_to_judge(provider, llm_server, context):
    # Agents only check that edits apply; catching the cache is the evaluator's job (see test_loop_llm.py).
    llm_server.push(Reply(CHEAT))
    proposal = make(provider, llm_server).propose(context)
    assert "_SEEN" in apply_edits(context.parent_files, proposal.edits)["moe.py"]


@pytest.mark.parametrize("provider, status", [("anthropic", 429), ("anthropic", 529), ("anthropic", 500),
                                              ("openai", 429), ("openai", 500), ("openai", 503)])
def test_transient_errors_are_retried_with_backoff(provider, status, llm_server, context, caplog):
    llm_server.push(Reply(status=status), Reply(status=status), Reply(GOOD, input_tokens=10, output_tokens=5))
    ledger = CostLedger()
    with caplog.at_level(logging.WARNING, logger="swarm.agents.llm"):
        proposal = make(provider, llm_server, ledger).propose(context)
    assert proposal.input_tokens == 10 and len(llm_server.requests) == 3
    delays = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(delays) == 2 and f"HTTP {status}" in delays[0]
    assert "retrying in 0.01 s" in delays[0] and "retrying in 0.02 s" in delays[1]  # doubled
    assert len(ledger.calls) == 1  # failed attempts cost nothing


def test_retry_after_header_is_honoured_up_to_the_cap(llm_server, context, caplog):
    llm_server.push(Reply(status=429, retry_after_s=0.04), Reply(GOOD))
    with caplog.at_level(logging.WARNING, logger="swarm.agents.llm"):
        make("anthropic", llm_server).propose(context)
    assert any("retrying in 0.04 s" in r.getMessage() for r in caplog.records)


@PROVIDERS
def test_retries_are_bounded(provider, llm_server, context):
    llm_server.push(*[Reply(status=500)] * 5)
    with pytest.raises(AgentError, match="failed after 3 attempt"):
        make(provider, llm_server).propose(context)
    assert len(llm_server.requests) == 3


@PROVIDERS
def test_client_errors_are_not_retried_and_name_the_fix(provider, llm_server, context):
    llm_server.push(Reply(status=401, text="invalid x-api-key"))
    key = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}[provider]
    with pytest.raises(AgentError, match=f"HTTP 401.*check the API key in \\${key}"):
        make(provider, llm_server).propose(context)
    assert len(llm_server.requests) == 1


def test_connection_errors_are_retried_then_reported(context):
    agent = AnthropicAgent("a", AgentSpec(provider="anthropic", model="claude-sonnet-4-5",
                                          base_url="http://127.0.0.1:9"), CostLedger(), FAST_RETRY)
    with pytest.raises(AgentError, match="failed after 3 attempt.*APIConnectionError"):
        agent.propose(context)


@PROVIDERS
def test_dollar_cap_stops_the_call_that_could_cross_it(provider, llm_server, context):
    # Worst case of one call: ~prompt/3 input tokens + 1000 output tokens; the cap leaves room for one.
    llm_server.push(Reply(GOOD, input_tokens=10, output_tokens=10), Reply(GOOD))
    ledger = CostLedger(cap_usd=0.03)
    agent = make(provider, llm_server, ledger)
    agent.propose(context)
    spent = ledger.spent_usd
    ledger.spent_usd = 0.03 - 0.001  # as if other agents had spent almost everything
    with pytest.raises(BudgetExceeded, match=r"cross the \$0.03 cap"):
        agent.propose(context)
    assert len(llm_server.requests) == 1 and spent > 0


def test_unknown_model_costs_nothing_with_a_warning_and_local_models_silently(llm_server, context, caplog):
    llm_server.push(Reply(GOOD), Reply(GOOD))
    with caplog.at_level(logging.WARNING, logger="swarm.agents.pricing"):
        official = AnthropicAgent("a", AgentSpec(provider="anthropic", model="claude-future-9"), CostLedger())
        local = make("openai", llm_server, model="qwen3-coder-30b")
        assert local.propose(context).cost_usd == 0.0
    # only the pricing logger's words: after a CLI test set the root logger to INFO, the agent's own
    # "qwen3-coder-30b answered" line is captured too
    warned = " ".join(r.getMessage() for r in caplog.records if r.name == "swarm.agents.pricing")
    assert official.price.input_per_mtok == 0 and "claude-future-9" in warned and "qwen3-coder" not in warned


@PROVIDERS
def test_a_small_context_window_bounds_the_prompt_or_is_refused_before_any_call(provider, llm_server, context):
    files = context.parent_files | {"codec.py": "def decode_frames(x):\n" + "    x = x * 2\n" * 4000}
    context = context.model_copy(update={"parent_files": files})
    llm_server.push(Reply(GOOD))
    make(provider, llm_server, context_tokens=8000).propose(context)
    body = llm_server.requests[0].body
    prompt = body["messages"][-1]["content"]
    system = body["system"] if provider == "anthropic" else body["messages"][0]["content"]
    assert len(prompt) + len(system) <= (8000 - 2 * 1000 - REPAIR_TOKENS) * CHARS_PER_TOKEN
    assert "### moe.py" in prompt and "Not shown, for this model's context window: codec.py" in prompt
    with pytest.raises(AgentError, match="raise the agent's context_tokens or lower its max_tokens"):
        make(provider, llm_server, context_tokens=3000).propose(context)
    assert len(llm_server.requests) == 1


@PROVIDERS
def test_a_server_behind_base_url_needs_no_key(provider, llm_server, context, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    llm_server.push(Reply(GOOD))
    assert make(provider, llm_server, model="llama-3-8b").propose(context).edits
