"""Renewing a transform already in an engine's lineage: its kernel files and tuning constants brought to what
applying it today would write.

A kept engine carries the kernel files of the day its transform was applied, and applying the transform again is
refused; without a renewal, a faster kernel written later reaches only engines that never had the transform. A
renewal replaces each of the transform's template files that differs from today's, and rewrites its params file
with today's default values: tiles are tuned for the kernels they drive, so the engine's old constants (possibly
retuned for the old kernels) are no guide for the new ones; retunes start again from the defaults. It goes through
the same strict edit path as any proposal, so the evaluator judges it like any candidate. Only transforms that
declare `templates` renew: files no other transform edits, so a whole-file replacement loses no later edit. A
transform whose files import another transform's template file renews only once that file is today's, and its
version covers that file too.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .base import TEMPLATES, Files, Params, Patch, Transform

RENEW = "renew "  # the title prefix of a renewal: RENEW + transform.label({"version": ...})


@dataclass(frozen=True, slots=True)
class Renewal:
    transform: Transform
    version: str  # a digest of today's template files, so a renewal that failed is not retried on the same kernels
    patches: list[Patch]

    @property
    def params(self) -> Params:
        return {"version": self.version}


def _folders(transform: Transform) -> list[str]:
    """The transform's template folders, then the renewable ones (whole files no transform edits) of the template
    files they import from: a renewal's kernel file may import a helper that an engine's older copy of another
    transform's file lacks."""
    from . import TRANSFORMS  # the registry imports this module

    renewable = {folder for t in TRANSFORMS.values() for folder in t.templates}
    owners = {asset.stem: asset.parent.name for asset in TEMPLATES.glob("*/*.py") if asset.parent.name in renewable}
    folders = list(transform.templates)
    for folder in folders:  # grows as it goes: imports of imports
        for asset in sorted((TEMPLATES / folder).glob("*.py")):
            for module in re.findall(r"^from \.(\w+) import", asset.read_text(), re.MULTILINE):
                if (owner := owners.get(module)) is not None and owner not in folders:
                    folders.append(owner)
    return folders


def _sources(folders: list[str]) -> dict[str, str]:
    return {asset.name: asset.read_text() for folder in folders for asset in sorted((TEMPLATES / folder).glob("*.py"))}


def _digest(sources: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for name, source in sorted(sources.items()):
        digest.update(f"{name}\0{source}\0".encode())
    return digest.hexdigest()[:8]


def template_version(transform: Transform) -> str:
    return _digest(_sources(_folders(transform)))


def renewal(transform: Transform, files: Files) -> Renewal | None:
    """The patches that bring `transform`'s files in `files` to today's version; None when the engine has them
    already, when the transform is not applied (its params file is absent: never applied, or retired by a later
    transform), when it declares no templates or knobs (whose params file says it is applied), or when a file of
    another transform that its files import is older than today's: that transform's renewal comes first (it also
    brings the params its file reads)."""
    if not transform.templates or transform.knobs is None or transform.knobs.path not in files:
        return None
    own = _sources(list(transform.templates))
    imported = _sources(_folders(transform)[len(transform.templates):])
    if any(files.get(name) != source for name, source in imported.items()):
        return None
    patches = [Patch(name, files.get(name, ""), source) for name, source in own.items() if files.get(name) != source]
    if not patches:
        return None
    old = files[transform.knobs.path]
    new = transform.knobs.text(next(transform.variants()))
    if new != old:
        patches.append(Patch(transform.knobs.path, old, new))
    return Renewal(transform, _digest(own | imported), patches)
