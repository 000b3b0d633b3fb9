"""The offline proposer: no API key, no network. It picks and parameterises optimisation transforms from
`knowledge_base/transforms/` and emits their SEARCH/REPLACE edits.

Choices are a function of (iteration, slot). Slot 0 exploits: it stacks every transform that lessons say
"worked" or was "promising" (correct and faster, but under the noise band alone), so small real gains add up
to one that clears it. The other slots explore: untried transforms, highest prior on the target's device first
(`Transform.prior`; while the parent misses its time-to-first-audio goal, a transform that shortens the prefill
or the first codec window ranks by its TTFA prior), one slot each. It skips transforms already in the parent's
lineage, whose prerequisites are missing or whose code is gone, and ranks failed ones last. It never repeats a
variant (`name(k=v)`) named in a failure, except one that was correct and only not faster on another parent: timing
is the parent's, and on a faster parent the same change can be a larger share of the time. Nor does it explore what
this run already proposed on the parent, or what slot 0 stacks.

The first exploring slot leaps: one candidate stacking every transform proven on the device (`Transform.proven`)
with a prior above 1 that the lineage lacks and that no failure bans, prerequisites first; each such stack once
per parent. One step at a time, a
lineage that lacks many proven transforms needs an evaluation for each, and a transform measured alone can look
flat on one parent and pay on another (inductor_decode_steps: 1.04x in 12-frame trials, 1.44x at steady state).
Lessons about a leap concern that stack only: they do not mark its members.

Past the untried transforms whose prior beats RETUNE_PRIOR, exploring slots retune: one knob of a transform in
the lineage (a Triton tile or warp count in its params file) set to another value of its space, since a kept
engine cannot take the transform again with better parameters. The transforms whose kernels take most of the
parent's profiled time are retuned first (a kernel name in two transforms' files splits its time between them; a
knob that orders the whole frame's work, a stream priority, reaches all of it). Retunes
that failed are avoided by the same rule as variants; their lessons, like a leap's, say nothing about the
transform.

Before all of those come renewals: a transform of the lineage whose kernel files in templates/ changed since the
engine took them, brought to today's version and default constants (renew.py). A leap puts the renewals
of proven transforms first in its stack. A renewal that failed is not retried on the same kernel version.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from knowledge_base.transforms import TRANSFORMS, NotApplicable, Params, Transform
from knowledge_base.transforms.renew import RENEW, Renewal, renewal
from knowledge_base.transforms.base import template_kernels
from knowledge_base.transforms.retune import RETUNE, retunes

from ..edits import EditError, apply_edits, patch_edits
from ..proposal import FileEdit, Lesson, Proposal, ProposalContext
from .base import AgentExhausted


@dataclass(frozen=True, slots=True)
class _Choice:
    transform: Transform
    params: Params
    edits: list[FileEdit]
    # RETUNE: params is the one parameter this changes on a transform of the lineage; RENEW: params names the
    # kernel version it brings that transform to; "": the transform applied with params
    kind: str = ""

    @property
    def label(self) -> str:
        return self.kind + self.transform.label(self.params)


class OfflineAgent:
    def __init__(self, name: str) -> None:
        self.name = name

    def propose(self, context: ProposalContext) -> Proposal:
        ranking = _ranking(context)
        banned = _banned_text(context)
        good = [t for t, score, _ in ranking if score > 0]
        worked = [t for t, score, _ in ranking if score == 2]
        exploit = _stack(good, context.parent_files, banned)
        if [c for c in exploit if c.transform not in worked] and _tried(_title(exploit), context):
            exploit = []  # this exact stack (or lone promising transform) was measured here already: explore instead
        chosen = exploit if context.slot == 0 else []
        title = _title(chosen)
        if not chosen:  # explore
            k = context.slot - (1 if exploit else 0)
            leap = _leap(context, banned)
            if k == 0 and leap:
                chosen, title = leap, LEAP + _title(leap)
            else:
                # slot 0's stack and what this run measured on the parent are not proposed again here
                avoid = frozenset(context.measured_on_parent) | {_title(exploit)}
                first = _explore(_explore_options(context, ranking, _renewals(context)), context.parent_files, banned,
                                 avoid, k - (1 if leap else 0))
                chosen = [first] if first else []
                title = _title(chosen)
        if not chosen:
            raise AgentExhausted(f"{self.name}: no transform left to apply to {context.parent_id} on "
                                 f"{context.device} in slot {context.slot}, past the other slots' (lineage: "
                                 f"{', '.join(context.applied_transforms) or 'none'})")
        return Proposal(
            agent=self.name,
            title=title,
            rationale="\n".join(f"{c.label}: {_WHY.get(c.kind, '')}{c.transform.summary}" for c in chosen),
            edits=[e for c in chosen for e in c.edits],
            transforms=[c.transform.name for c in chosen],
        )


LEAP = "leap: "  # the title prefix of a leap, whose lessons say nothing about its members one by one
TIMING = ("slower", "noisy")  # verdicts of correct engines: not faster, or not measurably
# an estimate: a tile or warp count of one kernel family moves a frame by a few percent; transforms with a higher
# prior are explored before retunes, the others after
RETUNE_PRIOR = 1.03
_WHY = {RETUNE: "another value of a parameter of this applied transform; ",
        RENEW: "today's kernel files and default constants of this applied transform; "}


def _cites_members(text: str) -> bool:
    """Whether a failure or lesson speaks for the variants it cites: not a leap's (a stack), a retune's (a
    parameter value of an applied transform) or a renewal's (its kernel version)."""
    return not text.startswith((LEAP, RETUNE, RENEW))


def _failed_text(context: ProposalContext) -> str:
    """Every failure citing a transform: those rank last."""
    return "\n".join([*filter(_cites_members, context.failures),
                      *(f"{x.summary} {x.evidence}" for x in _member_lessons(context) if x.outcome == "failed")])


def _banned_text(context: ProposalContext, of_kind: str = "") -> str:
    """The failures whose variants (or, with `of_kind` RETUNE or RENEW, retunes or renewals) are never proposed
    again: all but correct-and-not-faster ones measured on another parent (a run's failure lines name no parent;
    such verdicts are in its lessons too)."""
    here = f" on {context.parent_label}:"

    def about(text: str) -> bool:
        return text.startswith(of_kind) if of_kind else _cites_members(text)
    return "\n".join([*(f for f in context.failures if about(f) and not any(f" ({s}): " in f for s in TIMING)),
                      *(f"{x.summary} {x.evidence}" for x in context.lessons if about(x.summary)
                        and x.outcome == "failed" and (x.verdict not in TIMING or here in x.summary))])


def _member_lessons(context: ProposalContext) -> list[Lesson]:
    """The lessons that speak for the transforms they cite."""
    return [x for x in context.lessons if _cites_members(x.summary)]


def _prior(transform: Transform, context: ProposalContext) -> float:
    """The transform's prior on the context's device, for the figures the parent still misses: while time to first
    audio misses its goal, transforms that shorten it rank by that."""
    return transform.prior(context.device, frozenset(context.unmet_aims))


def _reach(transform: Transform, context: ProposalContext, lineage: frozenset[str], files: dict[str, str]) -> float:
    """The transform's prior times the best reach of what applying it (on `files`) makes applicable: a
    prerequisite is worth what it leads to (a small kernel change that a large one builds on ranks as the pair),
    counting only what would apply after it (not an alternative it rules out)."""
    have = lineage | {transform.name}
    unlocked = [t for t in TRANSFORMS.values() if context.device in t.devices and t.name not in have
                and transform.name in t.requires and set(t.requires) <= have]
    best = 1.0
    if unlocked and (edits := _edits(transform, next(transform.variants()), files)) is not None:
        after = apply_edits(files, edits)
        best = max([_reach(t, context, have, after) for t in unlocked
                    if _edits(t, next(t.variants()), after) is not None], default=1.0)
    return _prior(transform, context) * best


def _explore_options(context: ProposalContext, ranking: list[tuple[Transform, int, float]],
                     renewals: list[_Choice]) -> list[Transform | _Choice]:
    """What the exploring slots take in turn: renewals, then untried transforms by prior (all of them if none is
    untried), with the retunes of the lineage's transforms before those whose prior, with what they make
    applicable, is under RETUNE_PRIOR."""
    fresh = [(t, reach) for t, score, reach in ranking if score == 0] or [(t, reach) for t, _, reach in ranking]
    above = [t for t, reach in fresh if reach >= RETUNE_PRIOR]
    return renewals + above + _retunes(context) + [t for t, _ in fresh if t not in above]


def _lineage(context: ProposalContext) -> list[Transform]:
    """The lineage's known transforms, highest prior on the device first."""
    names = sorted({n for n in context.applied_transforms if n in TRANSFORMS},
                   key=lambda n: (-_prior(TRANSFORMS[n], context), n))
    return [TRANSFORMS[n] for n in names]


def _fresh(choice: _Choice, context: ProposalContext, banned: str) -> bool:
    """Whether a retune or renewal was neither tried on this parent nor failed for good, and applies."""
    if choice.label in banned or _tried(choice.label, context):
        return False
    try:
        apply_edits(context.parent_files, choice.edits)
    except EditError:
        return False
    return True


def _renewals(context: ProposalContext) -> list[_Choice]:
    """The renewal of each lineage transform whose kernel files changed since the parent took them."""
    banned = _banned_text(context, of_kind=RENEW)
    found = []
    for transform in _lineage(context):
        if (r := renewal(transform, context.parent_files)) is not None:
            choice = _renewal_choice(r)
            if _fresh(choice, context, banned):
                found.append(choice)
    return found


def _renewal_choice(r: Renewal) -> _Choice:
    return _Choice(r.transform, r.params, patch_edits(r.patches), RENEW)


def _retunes(context: ProposalContext) -> list[_Choice]:
    """Each one-parameter change of the lineage's tunable transforms that applies, was not tried on this parent and
    did not fail for good: those whose kernels took most of the parent's profiled time first, then by prior."""
    banned = _banned_text(context, of_kind=RETUNE)
    found = []
    for transform in _lineage(context):
        for r in retunes(transform, context.parent_files):
            choice = _Choice(r.transform, {r.param: r.value}, patch_edits([r.patch]), RETUNE)
            if _fresh(choice, context, banned):
                found.append(choice)
    # the transforms with a retune still have their params file: retired ones (triton_fp8_moe) claim no kernels
    kernels = {c.transform.name: template_kernels(c.transform) for c in found}
    # a kernel name in several transforms' files (the decode and prefill MoE kernels) splits its time among them
    claims = Counter(k for names in kernels.values() for k in names)
    # a frame-wide knob (a stream priority) has every kernel of the frame in its reach
    frame_ms = sum(context.parent_kernels.values())
    profiled_ms = {t: frame_ms if TRANSFORMS[t].knobs.frame_wide else
                   sum(context.parent_kernels.get(k, 0.0) / claims[k] for k in names)
                   for t, names in kernels.items()}
    return sorted(found, key=lambda c: -profiled_ms[c.transform.name])  # stable: ties keep the prior order


def _ranking(context: ProposalContext) -> list[tuple[Transform, int, float]]:
    """Eligible transforms with their scores (worked 2, promising 1, untried 0, failed -1) and reaches (_reach),
    best first; within a score, highest reach on the context's device first, equal reaches shuffled by the
    iteration."""
    lineage = frozenset(context.applied_transforms)
    failed = _failed_text(context)
    worked = " ".join(x.summary for x in _member_lessons(context) if x.outcome == "worked")
    promising = " ".join(x.summary for x in _member_lessons(context) if x.outcome == "promising")
    scored = [(t, 2 if _cited(t, worked) else 1 if _cited(t, promising) else -1 if _cited(t, failed) else 0)
              for t in TRANSFORMS.values()
              if context.device in t.devices and t.name not in lineage and set(t.requires) <= lineage]
    rng = random.Random(f"offline:{context.iteration}")
    ranking: list[tuple[Transform, int, float]] = []
    for score in sorted({s for _, s in scored}, reverse=True):
        tier = [(t, s, _reach(t, context, lineage, context.parent_files)) for t, s in scored if s == score]
        rng.shuffle(tier)
        ranking += sorted(tier, key=lambda tsr: -tsr[2])  # stable: equal reaches keep the shuffle
    return ranking


def _cited(transform: Transform, text: str) -> bool:
    return f"{transform.name}(" in text


def _explore(options: list[Transform | _Choice], files: dict[str, str], banned: str, avoid: frozenset[str],
             k: int) -> _Choice | None:
    """The k-th distinct choice of the exploring slots, round by round: round r takes each option's r-th usable
    variant (a renewal or retune is one), so that parallel slots never propose the same engine."""
    streams = [_usable(o, files, banned, avoid) for o in options]
    taken: set[str] = set()
    while streams:
        for stream in list(streams):
            choice = next(stream, None)
            if choice is None:
                streams.remove(stream)
            elif choice.label not in taken:
                if len(taken) == k:
                    return choice
                taken.add(choice.label)
    return None


def _usable(option: Transform | _Choice, files: dict[str, str], banned: str,
            avoid: frozenset[str] = frozenset()) -> Iterator[_Choice]:
    """An option's variants in order, but those named in `banned`, labelled as one of `avoid`, or whose edits do
    not apply to `files`."""
    if isinstance(option, _Choice):
        if option.label not in avoid:
            yield option
        return
    for params in option.variants():
        if (label := option.label(params)) in banned or label in avoid:
            continue
        edits = _edits(option, params, files)
        if edits is not None:
            yield _Choice(option, params, edits)


def _title(chosen: list[_Choice]) -> str:
    return " + ".join(c.label for c in chosen)


def _tried(title: str, context: ProposalContext) -> bool:
    """Whether the stack of this title was already evaluated on this parent, or failed anywhere (a lesson or
    failure cites its title). A promising stack measured on another parent is a new experiment here: on a faster
    parent the same change can be a larger share of the time."""
    measured = f"{title} on {context.parent_label}:"
    return any(x.summary.startswith(measured) for x in context.lessons) \
        or any(text.startswith(title + " (") for text in context.failures)


def _leap(context: ProposalContext, banned: str) -> list[_Choice]:
    """The stack of the renewals of the lineage's proven transforms, then every transform proven on the device
    with a prior above 1 that the lineage lacks (highest prior first, each after its prerequisites; first
    variants), if it has at least two and was not tried on this parent; else []."""
    banned_renewals = _banned_text(context, of_kind=RENEW)
    files, renewed = context.parent_files, []
    waiting = [t for t in _lineage(context) if context.device in t.proven]

    def first_renewal(files: dict[str, str]) -> tuple[Transform, _Choice] | None:
        for t in waiting:
            if (r := renewal(t, files)) is not None:
                choice = _renewal_choice(r)
                if choice.label not in banned_renewals and not _tried(choice.label, context):
                    return t, choice
        return None

    # each on the files the previous ones produced: two may bring the same new shared file, and one may wait for
    # the renewal of a file it imports (renew.py), so rounds go on until none applies
    while (found := first_renewal(files)) is not None:
        transform, choice = found
        renewed.append(choice)
        files = apply_edits(files, choice.edits)
        waiting.remove(transform)
    have = set(context.applied_transforms)
    pending = sorted((t for t in TRANSFORMS.values() if context.device in t.proven and t.name not in have
                      and _prior(t, context) > 1.0), key=lambda t: -_prior(t, context))
    order: list[Transform] = []
    while ready := [t for t in pending if set(t.requires) <= have]:
        order.append(ready[0])
        have.add(ready[0].name)
        pending.remove(ready[0])
    chosen = renewed + _stack(order, files, banned)
    if len(chosen) < 2 or _tried(LEAP + _title(chosen), context):
        return []
    return chosen


def _stack(transforms: list[Transform], files: dict[str, str], banned: str) -> list[_Choice]:
    """Each transform's first applicable variant, stacked in order onto the files the previous ones produced."""
    chosen: list[_Choice] = []
    for transform in transforms:
        choice = next(_usable(transform, files, banned), None)
        if choice is not None:
            chosen.append(choice)
            files = apply_edits(files, choice.edits)
    return chosen


def _edits(transform: Transform, params: Params, files: dict[str, str]) -> list[FileEdit] | None:
    """The transform's edits for `files`, checked through the strict apply path; None if they do not apply."""
    try:
        edits = patch_edits(transform.apply(files, params))
        apply_edits(files, edits)
    except (NotApplicable, EditError):
        return None
    return edits
