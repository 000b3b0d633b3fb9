"""Target files and their schema: `load_target(path) -> Target`."""
from .schema import Target, TargetError, load_target

__all__ = ["Target", "TargetError", "load_target"]
