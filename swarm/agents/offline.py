"""The offline proposer: no API key, no network. It picks and parameterises optimisation transforms from
`knowledge_base/transforms/` and emits their SEARCH/REPLACE edits.

Choices are a function of (iteration, slot). Slot 0 exploits: it stacks every transform that lessons say
"worked" or was "promising" (correct and faster, but under the noise band alone), so small real gains add up
to one that clears it. The other slots explore: untried transforms, highest prior on the target's device first
(`Transform.prior`), one slot each. It skips transforms already in the parent's lineage, whose prerequisites are
missing or whose code is gone, ranks failed ones last and never repeats a variant (`name(k=v)`) named in a failure.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from knowledge_base.transforms import TRANSFORMS, NotApplicable, Params, Transform

from ..edits import EditError, apply_edits
from ..proposal import FileEdit, Proposal, ProposalContext
from .base import AgentError


@dataclass(frozen=True, slots=True)
class _Choice:
    transform: Transform
    params: Params
    edits: list[FileEdit]

    @property
    def label(self) -> str:
        return self.transform.label(self.params)


class OfflineAgent:
    def __init__(self, name: str) -> None:
        self.name = name

    def propose(self, context: ProposalContext) -> Proposal:
        ranking = _ranking(context)
        failed = _failed_text(context)
        good = [t for t, score in ranking if score > 0]
        worked = [t for t, score in ranking if score == 2]
        chosen = _stack(good, context.parent_files, failed) if context.slot == 0 else []
        unproven = [c for c in chosen if c.transform not in worked]
        if unproven and _tried(chosen, context):
            chosen = []  # this exact stack (or lone promising transform) was measured here already: explore instead
        if not chosen:  # explore
            fresh = [t for t, score in ranking if score == 0] or [t for t, _ in ranking]
            k = context.slot - (1 if good else 0)
            order = fresh[k % len(fresh):] + fresh[:k % len(fresh)] if fresh else []
            first = next((c for t in order
                          if (c := _first_variant(t, context.parent_files, failed, k // max(len(fresh), 1)))), None)
            chosen = [first] if first else []
        if not chosen:
            raise AgentError(f"{self.name}: no transform left to apply to {context.parent_id} on {context.device} "
                             f"(lineage: {', '.join(context.applied_transforms) or 'none'})")
        return Proposal(
            agent=self.name,
            title=" + ".join(c.label for c in chosen),
            rationale="\n".join(f"{c.label}: {c.transform.summary}" for c in chosen),
            edits=[e for c in chosen for e in c.edits],
            transforms=[c.transform.name for c in chosen],
        )


def _failed_text(context: ProposalContext) -> str:
    return "\n".join([*context.failures,
                      *(f"{x.summary} {x.evidence}" for x in context.lessons if x.outcome == "failed")])


def _ranking(context: ProposalContext) -> list[tuple[Transform, int]]:
    """Eligible transforms with their scores (worked 2, promising 1, untried 0, failed -1), best first; within a
    score, highest prior on the context's device first, equal priors shuffled by the iteration."""
    lineage = set(context.applied_transforms)
    failed = _failed_text(context)
    worked = " ".join(x.summary for x in context.lessons if x.outcome == "worked")
    promising = " ".join(x.summary for x in context.lessons if x.outcome == "promising")
    scored = [(t, 2 if _cited(t, worked) else 1 if _cited(t, promising) else -1 if _cited(t, failed) else 0)
              for t in TRANSFORMS.values()
              if context.device in t.devices and t.name not in lineage and set(t.requires) <= lineage]
    rng = random.Random(f"offline:{context.iteration}")
    ranking: list[tuple[Transform, int]] = []
    for score in sorted({s for _, s in scored}, reverse=True):
        tier = [(t, s) for t, s in scored if s == score]
        rng.shuffle(tier)
        ranking += sorted(tier, key=lambda ts: -ts[0].prior(context.device))  # stable: equal priors keep the shuffle
    return ranking


def _cited(transform: Transform, text: str) -> bool:
    return f"{transform.name}(" in text


def _first_variant(transform: Transform, files: dict[str, str], failed: str, skip: int) -> _Choice | None:
    """The first variant (after rotating by `skip`) not named in a failure whose edits apply to `files`."""
    variants = [p for p in transform.variants() if transform.label(p) not in failed]
    if not variants:
        return None
    skip %= len(variants)
    for params in variants[skip:] + variants[:skip]:
        edits = _edits(transform, params, files)
        if edits is not None:
            return _Choice(transform, params, edits)
    return None


def _tried(chosen: list[_Choice], context: ProposalContext) -> bool:
    """Whether this stack was already evaluated on this parent, or failed anywhere (a lesson or failure cites its
    title). A promising stack measured on another parent is a new experiment here: on a faster parent the
    same change can be a larger share of the time."""
    title = " + ".join(c.label for c in chosen)
    return any(text.startswith(f"{title} on {context.parent_id}:") for text in (x.summary for x in context.lessons)) \
        or any(text.startswith(title + " (") for text in context.failures)


def _stack(transforms: list[Transform], files: dict[str, str], failed: str) -> list[_Choice]:
    """Each transform's first applicable variant, stacked in order onto the files the previous ones produced."""
    chosen: list[_Choice] = []
    for transform in transforms:
        choice = _first_variant(transform, files, failed, 0)
        if choice is not None:
            chosen.append(choice)
            files = apply_edits(files, choice.edits)
    return chosen


def _edits(transform: Transform, params: Params, files: dict[str, str]) -> list[FileEdit] | None:
    """The transform's edits for `files`, checked through the strict apply path; None if they do not apply."""
    try:
        edits = [FileEdit(path=p.path, search=p.search, replace=p.replace) for p in transform.apply(files, params)]
        apply_edits(files, edits)
    except (NotApplicable, EditError):
        return None
    return edits
