"""The Agent interface every proposer implements (LLM providers and the offline proposer)."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..proposal import Proposal, ProposalContext


class AgentError(RuntimeError):
    """An agent could not produce a usable proposal (API failure after retries, budget cap, unparseable answer)."""


class AgentExhausted(AgentError):
    """Asked again about the same parent, the agent would fail the same way: the offline proposer has nothing left
    for the slot, or the prompt does not fit the model's context window."""


class BudgetExceeded(AgentError):
    """The hard dollar cap would be crossed by this call."""


@runtime_checkable
class Agent(Protocol):
    name: str

    def propose(self, context: ProposalContext) -> Proposal:
        """One candidate variant of the parent engine, as strict SEARCH/REPLACE edits."""
