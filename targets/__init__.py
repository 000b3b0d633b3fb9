"""Target files and their schema: `load_target(path) -> Target`."""
from .schema import Target, TargetError, load_target, with_agents, with_budget

__all__ = ["Target", "TargetError", "load_target", "with_agents", "with_budget"]
