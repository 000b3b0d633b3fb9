"""Engines as git commits: `EngineRepo` (commit, materialise, diff, tag) over $SWARM_HOME/engines."""
from .repo import CommitInfo, EngineRepo, engine_files, write_files

__all__ = ["CommitInfo", "EngineRepo", "engine_files", "write_files"]
