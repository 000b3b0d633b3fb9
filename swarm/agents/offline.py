"""The offline proposer: no API key, no network. It picks and parameterises optimisation transforms from
`knowledge_base/transforms/` and emits their SEARCH/REPLACE edits.

Choices are a function of (iteration, slot): the slots of one iteration take different transforms. It skips
transforms already in the parent's lineage, whose prerequisites are missing or whose code is gone, ranks
transforms that lessons say "worked" first and those that failed last, never repeats a variant (`name(k=v)`)
named in a failure, and composes two transforms when both have worked before.
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
        ranking, top = _ranking(context)
        failed = _failed_text(context)
        # Slots of one iteration start at different places of the same ranking, so they do not collide;
        # a slot past the top tier's size moves on to the next parameter variant.
        start = context.slot % top if top else 0
        order = ranking[start:top] + ranking[:start] + ranking[top:]
        first = next((c for t, _ in order
                      if (c := _first_variant(t, context.parent_files, failed, context.slot // max(top, 1)))), None)
        if first is None:
            raise AgentError(f"{self.name}: no transform left to apply to {context.parent_id} on {context.device} "
                             f"(lineage: {', '.join(context.applied_transforms) or 'none'})")
        chosen = [first]
        if next(s for t, s in ranking if t is first.transform) > 0:
            chosen += _companion(first, ranking, context, failed)
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


def _ranking(context: ProposalContext) -> tuple[list[tuple[Transform, int]], int]:
    """Eligible transforms with their scores, best tier first (within a tier: highest prior impact first, equal
    priors shuffled by the iteration), and the size of the best tier."""
    lineage = set(context.applied_transforms)
    failed = _failed_text(context)
    worked = " ".join(f"{x.summary} {x.evidence}" for x in context.lessons if x.outcome == "worked")
    scored = [(t, (2 if _cited(t, worked) else 0) - (1 if _cited(t, failed) else 0))
              for t in TRANSFORMS.values()
              if context.device in t.devices and t.name not in lineage and set(t.requires) <= lineage]
    rng = random.Random(f"offline:{context.iteration}")
    ranking: list[tuple[Transform, int]] = []
    for score in sorted({s for _, s in scored}, reverse=True):
        tier = [(t, s) for t, s in scored if s == score]
        rng.shuffle(tier)
        ranking += sorted(tier, key=lambda ts: -ts[0].impact)  # stable: equal priors keep the shuffle
    top = sum(1 for _, s in ranking if s == ranking[0][1]) if ranking else 0
    return ranking, top


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


def _companion(first: _Choice, ranking: list[tuple[Transform, int]], context: ProposalContext,
               failed: str) -> list[_Choice]:
    """Another transform that has also worked, on a different feature, whose edits stack on the first's."""
    stacked = apply_edits(context.parent_files, first.edits)
    for transform, score in ranking:
        if score <= 0 or transform.feature == first.transform.feature or transform is first.transform:
            continue
        choice = _first_variant(transform, stacked, failed, 0)
        if choice is not None:
            return [choice]
    return []


def _edits(transform: Transform, params: Params, files: dict[str, str]) -> list[FileEdit] | None:
    """The transform's edits for `files`, checked through the strict apply path; None if they do not apply."""
    try:
        edits = [FileEdit(path=p.path, search=p.search, replace=p.replace) for p in transform.apply(files, params)]
        apply_edits(files, edits)
    except (NotApplicable, EditError):
        return None
    return edits
