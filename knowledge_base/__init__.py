"""The knowledge base: SQLite store of runs, candidates, verdicts, kept engines and lessons.

    kb = KnowledgeStore(path)   # default path: swarm.paths.kb_path(target)
"""
from .records import (
    REFERENCE_ID,
    CandidateRecord,
    CandidateState,
    EngineKey,
    Figures,
    KeptEngine,
    LessonRecord,
    RunRecord,
    RunState,
    VerdictRecord,
)
from .store import KnowledgeStore

__all__ = [
    "REFERENCE_ID", "CandidateRecord", "CandidateState", "EngineKey", "Figures", "KeptEngine", "KnowledgeStore",
    "LessonRecord", "RunRecord", "RunState", "VerdictRecord",
]
