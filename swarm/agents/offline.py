"""The offline proposer: no API key, no network. It picks and parameterises optimisation transforms from
`knowledge_base/transforms/` and emits their SEARCH/REPLACE edits.

Choices are deterministic for a given (iteration, slot, agent index). It skips transforms already in the
parent's lineage or whose code is gone, prefers transforms that lessons say "worked", never repeats a variant
that failed, and composes two transforms when both have worked before.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from knowledge_base.transforms import TRANSFORMS, NotApplicable, Params, Transform

from ..edits import EditError, apply_edits
from ..proposal import FileEdit, Proposal, ProposalContext
from .base import AgentError


@dataclass(frozen=True, slots=True)
class _Option:
    transform: Transform
    params: Params
    score: int  # higher is tried first

    @property
    def label(self) -> str:
        return self.transform.label(self.params)


class OfflineAgent:
    def __init__(self, name: str, index: int = 0) -> None:
        self.name = name
        self.index = index  # agents of one run diversify on it

    def propose(self, context: ProposalContext) -> Proposal:
        rng = random.Random(f"{context.iteration}:{context.slot}:{self.index}")
        options = _options(context)
        if not options:
            raise AgentError(f"{self.name}: no transform left to apply to {context.parent_id} on {context.device} "
                             f"(lineage: {', '.join(context.applied_transforms) or 'none'})")
        best = max(o.score for o in options)
        top = [o for o in options if o.score == best]
        rng.shuffle(top)
        # Parallel slots take different entries of the same shuffled ranking, so they do not collide.
        first = top[(context.slot + self.index) % len(top)]
        chosen = [first]
        second = _companion(first, options, context, rng)
        if best > 0 and second is not None:
            chosen.append(second)
        edits = _edits(chosen, context.parent_files)
        assert edits is not None, "each option was checked to apply"
        return Proposal(
            agent=self.name,
            title=" + ".join(o.label for o in chosen),
            rationale="\n".join(f"{o.label}: {o.transform.summary}" for o in chosen),
            edits=edits,
            transforms=[o.transform.name for o in chosen],
        )


def _options(context: ProposalContext) -> list[_Option]:
    lineage = set(context.applied_transforms)
    failed = " ".join([*context.failures, *(f"{x.summary} {x.evidence}" for x in context.lessons
                                             if x.outcome == "failed")])
    worked = " ".join(f"{x.summary} {x.evidence}" for x in context.lessons if x.outcome == "worked")
    options = []
    for transform in TRANSFORMS.values():
        if (context.device not in transform.devices or transform.name in lineage
                or not set(transform.requires) <= lineage):
            continue
        for params in transform.variants():
            label = transform.label(params)
            if label in failed:
                continue
            score = (2 if transform.name in worked else 0) - (1 if transform.name in failed else 0)
            option = _Option(transform, params, score)
            if _edits([option], context.parent_files) is not None:
                options.append(option)
    return options


def _companion(first: _Option, options: list[_Option], context: ProposalContext,
               rng: random.Random) -> _Option | None:
    """Another transform that has also worked, on a different feature, whose edits stack on the first's."""
    pool = [o for o in options if o.score > 0 and o.transform.feature != first.transform.feature
            and o.transform.name not in first.transform.requires and first.transform.name not in o.transform.requires]
    rng.shuffle(pool)
    return next((o for o in pool if _edits([first, o], context.parent_files) is not None), None)


def _edits(chosen: list[_Option], files: dict[str, str]) -> list[FileEdit] | None:
    """The options' edits, each computed on the files the previous ones produced; None if any does not apply."""
    edits: list[FileEdit] = []
    current = files
    try:
        for option in chosen:
            step = [FileEdit(path=p.path, search=p.search, replace=p.replace)
                    for p in option.transform.apply(current, option.params)]
            current = apply_edits(current, step)
            edits += step
    except (NotApplicable, EditError):
        return None
    return edits
