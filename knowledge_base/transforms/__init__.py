"""The offline proposer's optimisation transforms for the Drama 3 engine package, by name."""
from __future__ import annotations

from .base import NotApplicable, Params, Patch, Transform

ALL: tuple[Transform, ...] = ()
TRANSFORMS: dict[str, Transform] = {t.name: t for t in ALL}

__all__ = ["TRANSFORMS", "NotApplicable", "Params", "Patch", "Transform"]
