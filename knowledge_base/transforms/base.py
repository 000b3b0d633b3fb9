"""A transform: a named, documented optimisation of the engine package, with a parameter space.

`apply(files, params)` returns SEARCH/REPLACE patches computed against the given engine files (the reference
engine's code or a descendant of it), so transforms go through the same strict edit path as LLM answers.
It raises NotApplicable when the code it rewrites is not there (e.g. an earlier edit changed it).
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

Files = Mapping[str, str]
Params = dict[str, str | int | float | bool]
TEMPLATES = Path(__file__).parent / "templates"  # whole engine files that transforms add
# the figures acceptance criteria name (the AcceptanceSpec fields, as swarm.outcome.unmet_aims lists the missed
# ones), as Transform.prior weighs them: RTF and the speedup over the baseline move with frames/s
FIRST_AUDIO_AIM = "ttfa_ms"
THROUGHPUT_AIMS = frozenset({"frames_per_s", "rtf", "speedup"})


class NotApplicable(ValueError):
    """The engine files do not contain the code this transform rewrites."""


def literal(value: str | int | float | bool) -> str:
    """The value as the params files write it."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


@dataclass(frozen=True, slots=True)
class Knobs:
    """The parameters a transform writes as constant lines of one params file (`BLOCK_N = 16  # what it sets`):
    what a retune (retune.py) can change once the transform is in a lineage, and what a renewal (renew.py)
    carries over to the transform's current kernels."""

    path: str
    owner: str  # the transform's name, for the file's docstring
    notes: Mapping[str, str]  # parameter -> what its constant sets (the line's comment; "" for none)
    # True where the knobs order or overlap the whole frame's work (a stream priority) instead of tiling the
    # transform's own kernels: a retune then reaches the frame's whole profiled time, not its kernels' share
    frame_wide: bool = False

    @staticmethod
    def constant(param: str) -> str:
        return param.upper()

    def text(self, params: Params) -> str:
        lines = [f'"""Parameters the {self.owner} transform was applied with."""']
        for param, note in self.notes.items():
            line = f"{self.constant(param)} = {literal(params[param])}"
            lines.append(f"{line}  # {note}" if note else line)
        return "\n".join(lines) + "\n"

    def patch(self, params: Params) -> Patch:
        """The params file's creation."""
        return Patch(self.path, "", self.text(params))

    def powers_of_two(self, params: Params, names: tuple[str, ...] | None = None) -> dict[str, int]:
        """The knobs' values (or those of `names`) as ints, each a power of two (tile sizes and warps); else a
        ValueError naming them."""
        sizes = {name: int(params[name]) for name in (self.notes if names is None else names)}
        if any(n < 1 or n & (n - 1) for n in sizes.values()):
            raise ValueError(f"{self.owner}: every parameter must be a power of two, got {sizes}")
        return sizes


@dataclass(frozen=True, slots=True)
class Patch:
    """One SEARCH/REPLACE edit of a file in the engine package (`search == ""` creates the file; the whole file
    as `search` with `replace == ""` deletes it)."""

    path: str
    search: str
    replace: str


@dataclass(frozen=True, slots=True)
class Transform:
    name: str
    summary: str  # one line: what it changes and why it is faster
    feature: str  # architecture feature it touches: "fp8_moe", "gated_deltanet", "codebook_mtp", ...
    devices: frozenset[str]  # where it can help: {"cpu"}, {"cuda"} or both
    apply: Callable[[Files, Params], list[Patch]]
    space: Mapping[str, tuple] = field(default_factory=dict)  # parameter -> candidate values, best guess first
    requires: tuple[str, ...] = ()  # transforms that must already be in the lineage
    lesson: str = ""  # what to expect when it is tried (where it pays off, what it costs), for the agents
    # Device type -> rough prior of the frames/s speedup on that device, only to order untried transforms (lessons
    # override it). Per device because payoffs do not carry over: CPU-measured priors sent an H200 run to
    # fp8_dequant_at_build, whose bf16 experts do not fit next to the reference engine, and to CPU tweaks before
    # the GPU's sampling and codec transforms. A measurement (docs/benchmarks.md, docs/measurements/) where one
    # exists, else an estimate saying why.
    impact: Mapping[str, float] = field(default_factory=dict)
    # Device type -> rough prior of the time-to-first-audio speedup (the parent's TTFA over the candidate's), for
    # transforms that shorten the prefill or the first codec window: what orders them while TTFA misses its goal
    # (the judge keeps a TTFA win whose frames/s holds). Same evidence rule as `impact`.
    first_audio: Mapping[str, float] = field(default_factory=dict)
    # Device types where an engine with this transform passed the correctness gate and was timed (docs/
    # benchmarks.md): the offline proposer's leaps stack only these, so one leap is a fair bet, not a lottery.
    proven: frozenset[str] = frozenset()
    knobs: Knobs | None = None
    # folders of templates/ whose files it adds to the engine: what a renewal (renew.py) brings up to date
    templates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.knobs and not set(self.knobs.notes) <= set(self.space):
            raise ValueError(f"{self.name}: knobs {sorted(set(self.knobs.notes) - set(self.space))} are not in its "
                             "space")
        if self.templates and self.knobs is None:  # a renewal keeps the engine's values: its params file says them
            raise ValueError(f"{self.name}: templates to renew, but no knobs")
        if missing := [f for f in self.templates if not (TEMPLATES / f).is_dir()]:
            raise ValueError(f"{self.name}: no template folder {missing} under {TEMPLATES}")
        for what, devices in (("a prior", set(self.impact) | set(self.first_audio)), ("a proof", self.proven)):
            if not devices <= self.devices:  # for a device it never runs on: a typo
                raise ValueError(f"{self.name}: {what} for {sorted(devices - self.devices)}, not in its devices")

    def prior(self, device: str, aims: frozenset[str] = frozenset()) -> float:
        """The prior speedup on a device type ("cpu", "cuda"); 1.0 where none is given. `aims`: the figures the
        parent still misses (swarm.outcome's keys); while time to first audio is one, the larger of its prior and
        the frames/s prior, which counts only while a throughput figure misses too (or none is named)."""
        throughput = self.impact.get(device, 1.0)
        if FIRST_AUDIO_AIM not in aims:
            return throughput
        first_audio = self.first_audio.get(device, 1.0)
        return max(first_audio, throughput) if aims & THROUGHPUT_AIMS else first_audio

    def variants(self) -> Iterator[Params]:
        """Every parameter combination, in the space's order (the first is the default)."""
        keys = list(self.space)
        for values in itertools.product(*(self.space[k] for k in keys)):
            yield dict(zip(keys, values))

    def label(self, params: Params) -> str:
        """The variant's name as proposals and lessons cite it: `name(k=v, ...)`."""
        args = ", ".join(f"{k}={v}" for k, v in params.items())
        return f"{self.name}({args})"


def require_files(files: Files, transform: str, needs: Mapping[str, str]) -> None:
    """NotApplicable unless the package has every file of `needs` (path -> the transform that adds it), naming the
    transforms to apply first."""
    missing = [name for path, name in needs.items() if path not in files]
    if missing:
        raise NotApplicable(f"{transform}: apply {' and '.join(missing)} first")


def replace_once(files: Files, path: str, search: str, replace: str) -> Patch:
    """A patch of `path`, after checking `search` occurs in it exactly once (else NotApplicable)."""
    source = files.get(path)
    if source is None or source.count(search) != 1:
        raise NotApplicable(f"{path}: the code this transform rewrites is not there (or is ambiguous)")
    return Patch(path, search, replace)


def delete_file(files: Files, path: str) -> Patch:
    """A patch deleting `path` (its whole text as SEARCH, an empty REPLACE), for a file the transform leaves
    unused; NotApplicable if the package lacks it."""
    if path not in files:
        raise NotApplicable(f"{path}: the file this transform retires is not there")
    return Patch(path, files[path], "")


def template_files(files: Files, folder: str) -> list[Patch]:
    """Patches creating the engine files kept in templates/<folder>/. A file the package already has with the
    same text (added by another transform) is skipped; with different text the transform is NotApplicable."""
    patches = []
    for asset in sorted((TEMPLATES / folder).glob("*.py")):
        source = asset.read_text()
        if asset.name not in files:
            patches.append(Patch(asset.name, "", source))
        elif files[asset.name] != source:
            raise NotApplicable(f"{asset.name}: the package already has a different file of this name")
    return patches


def template_kernels(transform: Transform) -> frozenset[str]:
    """The names of the @triton.jit functions in the transform's template files: how a CUDA profile lists its
    kernels (helpers called inside a kernel are listed too, and match no profile row)."""
    return frozenset(name for folder in transform.templates for asset in (TEMPLATES / folder).glob("*.py")
                     for name in re.findall(r"@triton\.jit\s*\ndef (\w+)\(", asset.read_text()))
