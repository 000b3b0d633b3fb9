"""Variation: ask the agents for proposals in parallel (threads: the work is API calls) and turn each into a
candidate commit, or into a rejected candidate when its edits do not apply or the agent failed.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace

from candidates import EngineRepo
from knowledge_base import CandidateRecord, CandidateState

from .agents.base import Agent, AgentError, BudgetExceeded
from .edits import EditError, apply_edits
from .proposal import Proposal, ProposalContext

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlotAnswer:
    slot: int
    agent: str
    proposal: Proposal | None
    error: AgentError | None


def _slot_agent(agents: list[Agent], per_agent: int, slot: int) -> Agent:
    """Slots are filled agent by agent: agent k owns slots k*per_agent .. (k+1)*per_agent - 1."""
    return agents[slot // per_agent]


def ask_agents(agents: list[Agent], per_agent: int, slots: list[int],
               context_for: Callable[[int], ProposalContext]) -> Iterator[SlotAnswer]:
    """One proposal per empty slot, all in flight at once; answers arrive in completion order."""
    if not slots:
        return

    def ask(slot: int) -> SlotAnswer:
        agent = _slot_agent(agents, per_agent, slot)
        try:
            return SlotAnswer(slot, agent.name, agent.propose(context_for(slot)), None)
        except AgentError as e:
            log.warning("agent %s gave no proposal for slot %d: %s", agent.name, slot, e)
            return SlotAnswer(slot, agent.name, None, e)

    with ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="swarm-agent") as pool:
        for future in as_completed([pool.submit(ask, slot) for slot in slots]):
            yield future.result()


def is_budget_stop(answer: SlotAnswer) -> bool:
    return isinstance(answer.error, BudgetExceeded)


def commit_message(candidate_id: str, proposal: Proposal) -> str:
    transforms = f"\nTransforms: {', '.join(proposal.transforms)}" if proposal.transforms else ""
    return (f"{proposal.title}\n\n{proposal.rationale.strip()}\n\n"
            f"Agent: {proposal.agent}\nCandidate: {candidate_id}{transforms}\n")


@dataclass(frozen=True, slots=True)
class Built:
    record: CandidateRecord  # committed (git_commit set) unless `error`
    error: str = ""
    duplicate_of: str = ""  # an earlier candidate of the run with the same engine tree


def build_candidate(repo: EngineRepo, record: CandidateRecord, parent_files: dict[str, str], proposal: Proposal,
                    seen_trees: dict[str, str]) -> Built:
    """Apply the edits and commit; `seen_trees` (tree id -> candidate id) catches an engine proposed twice."""
    try:
        files = apply_edits(parent_files, proposal.edits)
    except EditError as e:
        return Built(record, str(e))
    if files == parent_files:
        return Built(record, "the edits leave every file unchanged: a candidate must change the engine")
    sha = repo.commit_candidate(record.parent_commit, files, candidate_id=record.id,
                                message=commit_message(record.id, proposal))
    tree = repo.tree(sha)
    if tree in seen_trees:
        return Built(record, f"the same engine as {seen_trees[tree]}, already proposed in this run",
                     duplicate_of=seen_trees[tree])
    seen_trees[tree] = record.id
    return Built(replace(record, git_commit=sha, state=CandidateState.PROPOSED))
