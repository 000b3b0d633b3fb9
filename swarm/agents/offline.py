"""The offline proposer: no API key, no network. It picks and parameterises optimisation transforms from
`knowledge_base/transforms/` and emits their SEARCH/REPLACE edits.

Choices are a function of (iteration, slot). Slot 0 exploits: it stacks every transform that lessons say
"worked" or was "promising" (correct and faster, but under the noise band alone), so small real gains add up
to one that clears it. The other slots explore: untried transforms, highest prior on the target's device first
(`Transform.prior`), one slot each. It skips transforms already in the parent's lineage, whose prerequisites are
missing or whose code is gone, and ranks failed ones last. It never repeats a variant (`name(k=v)`) named in a
failure, except one that was correct and only not faster on another parent: timing is the parent's, and on a
faster parent the same change can be a larger share of the time.

The first exploring slot leaps, once per parent: one candidate stacking every transform proven on the device
(`Transform.proven`) with a prior above 1 that the lineage lacks, prerequisites first. One step at a time, a
lineage that lacks many proven transforms needs an evaluation for each, and a transform measured alone can look
flat on one parent and pay on another (inductor_decode_steps: 1.04x in 12-frame trials, 1.44x at steady state).
Lessons about a leap concern that stack only: they do not mark its members.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from knowledge_base.transforms import TRANSFORMS, NotApplicable, Params, Transform

from ..edits import EditError, apply_edits
from ..proposal import FileEdit, Lesson, Proposal, ProposalContext
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
        banned = _banned_text(context)
        good = [t for t, score in ranking if score > 0]
        worked = [t for t, score in ranking if score == 2]
        chosen = _stack(good, context.parent_files, banned) if context.slot == 0 else []
        unproven = [c for c in chosen if c.transform not in worked]
        if unproven and _tried(_title(chosen), context):
            chosen = []  # this exact stack (or lone promising transform) was measured here already: explore instead
        title = _title(chosen)
        if not chosen:  # explore
            k = context.slot - (1 if good else 0)
            leap = _leap(context)
            if k == 0 and leap:
                chosen, title = leap, LEAP + _title(leap)
            else:
                k -= 1 if leap else 0
                fresh = [t for t, score in ranking if score == 0] or [t for t, _ in ranking]
                order = fresh[k % len(fresh):] + fresh[:k % len(fresh)] if fresh else []
                first = next((c for t in order if (c := _first_variant(t, context.parent_files, banned,
                                                                       k // max(len(fresh), 1)))), None)
                chosen = [first] if first else []
                title = _title(chosen)
        if not chosen:
            raise AgentError(f"{self.name}: no transform left to apply to {context.parent_id} on {context.device} "
                             f"(lineage: {', '.join(context.applied_transforms) or 'none'})")
        return Proposal(
            agent=self.name,
            title=title,
            rationale="\n".join(f"{c.label}: {c.transform.summary}" for c in chosen),
            edits=[e for c in chosen for e in c.edits],
            transforms=[c.transform.name for c in chosen],
        )


LEAP = "leap: "  # the title prefix of a leap, whose lessons say nothing about its members one by one
TIMING = ("slower", "noisy")  # verdicts of correct engines: not faster, or not measurably


def _failed_text(context: ProposalContext) -> str:
    """Every failure citing a transform: those rank last."""
    return "\n".join([*(f for f in context.failures if not f.startswith(LEAP)),
                      *(f"{x.summary} {x.evidence}" for x in _member_lessons(context) if x.outcome == "failed")])


def _banned_text(context: ProposalContext) -> str:
    """The failures whose variants are never proposed again: all but correct-and-not-faster ones measured on
    another parent (a run's failure lines name no parent; such verdicts are in its lessons too)."""
    here = f" on {context.parent_id}:"
    return "\n".join([*(f for f in context.failures
                        if not f.startswith(LEAP) and not any(f" ({status}): " in f for status in TIMING)),
                      *(f"{x.summary} {x.evidence}" for x in _member_lessons(context)
                        if x.outcome == "failed" and (x.verdict not in TIMING or here in x.summary))])


def _member_lessons(context: ProposalContext) -> list[Lesson]:
    """The lessons that speak for the transforms they cite: all but those of leaps."""
    return [x for x in context.lessons if not x.summary.startswith(LEAP)]


def _ranking(context: ProposalContext) -> list[tuple[Transform, int]]:
    """Eligible transforms with their scores (worked 2, promising 1, untried 0, failed -1), best first; within a
    score, highest prior on the context's device first, equal priors shuffled by the iteration."""
    lineage = set(context.applied_transforms)
    failed = _failed_text(context)
    worked = " ".join(x.summary for x in _member_lessons(context) if x.outcome == "worked")
    promising = " ".join(x.summary for x in _member_lessons(context) if x.outcome == "promising")
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


def _first_variant(transform: Transform, files: dict[str, str], banned: str, skip: int) -> _Choice | None:
    """The first variant (after rotating by `skip`) not named in `banned` whose edits apply to `files`."""
    variants = [p for p in transform.variants() if transform.label(p) not in banned]
    if not variants:
        return None
    skip %= len(variants)
    for params in variants[skip:] + variants[:skip]:
        edits = _edits(transform, params, files)
        if edits is not None:
            return _Choice(transform, params, edits)
    return None


def _title(chosen: list[_Choice]) -> str:
    return " + ".join(c.label for c in chosen)


def _tried(title: str, context: ProposalContext) -> bool:
    """Whether the stack of this title was already evaluated on this parent, or failed anywhere (a lesson or
    failure cites its title). A promising stack measured on another parent is a new experiment here: on a faster
    parent the same change can be a larger share of the time."""
    return any(text.startswith(f"{title} on {context.parent_id}:") for text in (x.summary for x in context.lessons)) \
        or any(text.startswith(title + " (") for text in context.failures)


def _leap(context: ProposalContext) -> list[_Choice]:
    """The stack of every transform proven on the device with a prior above 1 that the lineage lacks (highest
    prior first, each after its prerequisites; first variants), if it has at least two and was not tried on this
    parent; else []."""
    have = set(context.applied_transforms)
    pending = sorted((t for t in TRANSFORMS.values() if context.device in t.proven and t.name not in have
                      and t.prior(context.device) > 1.0), key=lambda t: -t.prior(context.device))
    order: list[Transform] = []
    while ready := [t for t in pending if set(t.requires) <= have]:
        order.append(ready[0])
        have.add(ready[0].name)
        pending.remove(ready[0])
    chosen = _stack(order, context.parent_files, _banned_text(context))
    if len(chosen) < 2 or _tried(LEAP + _title(chosen), context):
        return []
    return chosen


def _stack(transforms: list[Transform], files: dict[str, str], banned: str) -> list[_Choice]:
    """Each transform's first applicable variant, stacked in order onto the files the previous ones produced."""
    chosen: list[_Choice] = []
    for transform in transforms:
        choice = _first_variant(transform, files, banned, 0)
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
