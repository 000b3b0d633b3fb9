"""Retuning a transform already in an engine's lineage: one of its parameters set to another value of its space.

A transform with `knobs` writes those parameters as constants of a params file (`BLOCK_N = 16  # ...`); a kept
engine can only get better tiles for its kernels by editing that line, since applying the transform again is
refused. A retune is that one-line edit, through the same strict edit path as any proposal, so the evaluator
judges it like any candidate.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .base import Files, Patch, Transform, literal

RETUNE = "retune "  # the title prefix of a retune proposal: RETUNE + transform.label({param: value})


@dataclass(frozen=True, slots=True)
class Retune:
    transform: Transform
    param: str
    value: str | int | float | bool
    patch: Patch


def knob_line(source: str, constant: str) -> re.Match | None:
    """The params file's one `CONSTANT = value  # note` line (group 1: the value, 2: the rest), if exactly one."""
    matches = list(re.finditer(rf"^{constant} = (\S+)(.*)$", source, re.MULTILINE))
    return matches[0] if len(matches) == 1 else None


def retunes(transform: Transform, files: Files) -> list[Retune]:
    """Every one-parameter change of `transform`'s knobs that `files` can take: each other value in its space, in
    space order; none where the params file or its constant is missing (e.g. a later transform retired it)."""
    if transform.knobs is None:
        return []
    found = []
    path = transform.knobs.path
    for param in transform.knobs.notes:
        constant = transform.knobs.constant(param)
        line = knob_line(files.get(path, ""), constant)
        if line is None:
            continue
        for value in transform.space[param]:
            if literal(value) != line.group(1):
                new = f"{constant} = {literal(value)}{line.group(2)}"
                found.append(Retune(transform, param, value, Patch(path, line.group(0), new)))
    return found
