"""KnowledgeStore: the SQLite file ($SWARM_HOME/kb.sqlite by default) that holds every run's history.

Each state change is one transaction in WAL mode, so a process killed at any point leaves the file at the
last completed change: `swarm run --resume` rebuilds the loop's state from here alone.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields, replace
from datetime import datetime, timezone
from pathlib import Path

from .records import (
    CandidateRecord,
    CandidateState,
    EngineKey,
    Figures,
    HeldVerdict,
    KeptEngine,
    LessonRecord,
    RunRecord,
    RunState,
    VerdictRecord,
)

SCHEMA_VERSION = 2
_FIGURES = ("frames_per_s", "ttfa_ms", "rtf", "speedup")
_KEY = tuple(f.name for f in fields(EngineKey))

_HELD_VERDICTS = """CREATE TABLE held_verdicts (
    candidate_id TEXT PRIMARY KEY REFERENCES candidates(id), verdict_json TEXT NOT NULL, eval_seconds REAL NOT NULL,
    created_at TEXT NOT NULL)"""
_SCHEMA = f"""
CREATE TABLE runs (
    id TEXT PRIMARY KEY, target_name TEXT NOT NULL, target_json TEXT NOT NULL, baseline_request TEXT NOT NULL,
    baseline_id TEXT NOT NULL, baseline_commit TEXT NOT NULL, engine_key_json TEXT NOT NULL, secret INTEGER NOT NULL,
    state TEXT NOT NULL, stop_reason TEXT NOT NULL, calibration_json TEXT NOT NULL, baseline_figures_json TEXT NOT NULL,
    elapsed_s REAL NOT NULL, spent_usd REAL NOT NULL, started_at TEXT NOT NULL, finished_at TEXT NOT NULL);
CREATE TABLE candidates (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), iteration INTEGER NOT NULL, slot INTEGER NOT NULL,
    parent_id TEXT NOT NULL, parent_commit TEXT NOT NULL, agent TEXT NOT NULL, title TEXT NOT NULL,
    rationale TEXT NOT NULL, proposal_json TEXT NOT NULL, git_commit TEXT NOT NULL, state TEXT NOT NULL,
    cost_usd REAL NOT NULL, created_at TEXT NOT NULL, UNIQUE (run_id, iteration, slot));
CREATE TABLE verdicts (
    candidate_id TEXT PRIMARY KEY REFERENCES candidates(id), status TEXT NOT NULL, summary TEXT NOT NULL,
    evidence_json TEXT NOT NULL, verdict_json TEXT NOT NULL, {", ".join(f"{f} REAL" for f in _FIGURES)},
    eval_seconds REAL NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE kept_engines (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), parent_id TEXT NOT NULL, git_commit TEXT NOT NULL,
    {", ".join(f"{k} TEXT NOT NULL" for k in _KEY)}, {", ".join(f"{f} REAL" for f in _FIGURES)},
    speedup_vs_reference REAL NOT NULL, title TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE lessons (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, candidate_id TEXT NOT NULL, feature TEXT NOT NULL,
    outcome TEXT NOT NULL, summary TEXT NOT NULL, evidence TEXT NOT NULL, architecture TEXT NOT NULL,
    created_at TEXT NOT NULL);
{_HELD_VERDICTS};
CREATE INDEX candidates_by_run ON candidates(run_id, iteration, slot);
CREATE INDEX lessons_by_arch ON lessons(architecture, id);
PRAGMA user_version = {SCHEMA_VERSION};
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _figures(row: sqlite3.Row) -> Figures:
    return Figures(**{f: row[f] for f in _FIGURES})


class KnowledgeStore:
    """One SQLite file; safe to share between the loop's threads (one connection behind a lock)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        with self._transaction() as db:  # IMMEDIATE: two processes opening a new file create the schema once
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                version = SCHEMA_VERSION
            if version == 1:  # v2 adds held_verdicts; every v1 row reads the same
                db.execute(_HELD_VERDICTS)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                version = SCHEMA_VERSION
        if version != SCHEMA_VERSION:
            raise RuntimeError(f"{self.path}: knowledge base schema v{version}, this swarm reads v{SCHEMA_VERSION}; "
                               "point target.kb_path at a new file or upgrade swarm")

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _rows(self, sql: str, *args) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # runs

    def next_run_id(self, target_name: str) -> str:
        count = self._rows("SELECT COUNT(*) FROM runs WHERE target_name = ?", target_name)[0][0]
        return f"{target_name}-{count + 1:03d}"

    def create_run(self, run: RunRecord) -> RunRecord:
        run = replace(run, started_at=run.started_at or _now())
        with self._transaction() as db:
            db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                run.id, run.target_name, run.target_json, run.baseline_request, run.baseline_id, run.baseline_commit,
                json.dumps(asdict(run.engine_key)), run.secret, run.state.value, run.stop_reason,
                run.calibration_json, json.dumps(asdict(run.baseline_figures)), run.elapsed_s, run.spent_usd,
                run.started_at, run.finished_at))
        return run

    def run(self, run_id: str) -> RunRecord:
        rows = self._rows("SELECT * FROM runs WHERE id = ?", run_id)
        if not rows:
            known = ", ".join(r.id for r in self.runs()[-5:]) or "none yet"
            raise KeyError(f"no run {run_id!r} in {self.path} (recent runs: {known})")
        return _run(rows[0])

    def runs(self) -> list[RunRecord]:
        return [_run(r) for r in self._rows("SELECT * FROM runs ORDER BY started_at, id")]

    def set_calibration(self, run_id: str, calibration_json: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE runs SET calibration_json = ? WHERE id = ?", (calibration_json, run_id))

    def set_baseline_figures(self, run_id: str, figures: Figures) -> None:
        with self._transaction() as db:
            db.execute("UPDATE runs SET baseline_figures_json = ? WHERE id = ?", (json.dumps(asdict(figures)), run_id))

    def add_elapsed(self, run_id: str, seconds: float) -> None:
        with self._transaction() as db:
            db.execute("UPDATE runs SET elapsed_s = elapsed_s + ? WHERE id = ?", (seconds, run_id))

    def set_spent(self, run_id: str, usd: float) -> None:
        with self._transaction() as db:
            db.execute("UPDATE runs SET spent_usd = ? WHERE id = ?", (usd, run_id))

    def finish_run(self, run_id: str, reason: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE runs SET state = ?, stop_reason = ?, finished_at = ? WHERE id = ?",
                       (RunState.FINISHED.value, reason, _now(), run_id))

    def reopen_run(self, run_id: str) -> None:
        """A run stopped by its budget continues (the target's budget was raised)."""
        with self._transaction() as db:
            db.execute("UPDATE runs SET state = ?, stop_reason = '', finished_at = '' WHERE id = ?",
                       (RunState.RUNNING.value, run_id))

    # candidates and verdicts

    def add_candidate(self, candidate: CandidateRecord) -> CandidateRecord:
        candidate = replace(candidate, created_at=candidate.created_at or _now())
        with self._transaction() as db:
            _insert_candidate(db, candidate)
        return candidate

    def add_rejected_candidate(self, candidate: CandidateRecord, verdict: VerdictRecord,
                               lesson: LessonRecord | None) -> None:
        """A proposal that never became an engine (edits did not apply, agent failed): one transaction."""
        with self._transaction() as db:
            _insert_candidate(db, replace(candidate, state=CandidateState.DONE, created_at=_now()))
            _insert_verdict(db, verdict)
            if lesson is not None:
                _insert_lesson(db, lesson)

    def mark_evaluating(self, candidate_id: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE candidates SET state = ? WHERE id = ? AND state = ?",
                       (CandidateState.EVALUATING.value, candidate_id, CandidateState.PROPOSED.value))

    def hold_verdict(self, candidate_id: str, verdict_json: str, eval_seconds: float) -> None:
        """An evaluation's verdict that waits for the run's A/A calibration before it is decided: kept here, so
        that a run stopped meanwhile (a lease's end) decides it on resume instead of evaluating it again."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO held_verdicts VALUES (?,?,?,?)",
                       (candidate_id, verdict_json, eval_seconds, _now()))

    def held_verdicts(self, run_id: str) -> list[HeldVerdict]:
        rows = self._rows("SELECT h.* FROM held_verdicts h JOIN candidates c ON c.id = h.candidate_id "
                          "WHERE c.run_id = ? ORDER BY c.iteration, c.slot", run_id)
        return [HeldVerdict(r["candidate_id"], r["verdict_json"], r["eval_seconds"]) for r in rows]

    def record_outcome(self, verdict: VerdictRecord, lesson: LessonRecord | None,
                       kept: KeptEngine | None = None) -> None:
        """Verdict, lesson (if any) and (on PASS) the kept engine, in one transaction; the candidate becomes done
        and its held verdict, if any, is gone."""
        with self._transaction() as db:
            _insert_verdict(db, verdict)
            db.execute("DELETE FROM held_verdicts WHERE candidate_id = ?", (verdict.candidate_id,))
            db.execute("UPDATE candidates SET state = ? WHERE id = ?",
                       (CandidateState.DONE.value, verdict.candidate_id))
            if lesson is not None:
                _insert_lesson(db, lesson)
            if kept is not None:
                _insert_kept(db, kept)

    def candidates(self, run_id: str) -> list[CandidateRecord]:
        rows = self._rows("SELECT * FROM candidates WHERE run_id = ? ORDER BY iteration, slot", run_id)
        return [_candidate(r) for r in rows]

    def candidate(self, candidate_id: str) -> CandidateRecord:
        rows = self._rows("SELECT * FROM candidates WHERE id = ?", candidate_id)
        if not rows:
            raise KeyError(f"no candidate {candidate_id!r} in {self.path}")
        return _candidate(rows[0])

    def verdict(self, candidate_id: str) -> VerdictRecord | None:
        rows = self._rows("SELECT * FROM verdicts WHERE candidate_id = ?", candidate_id)
        return _verdict(rows[0]) if rows else None

    def verdicts(self, run_id: str) -> list[VerdictRecord]:
        rows = self._rows("SELECT v.* FROM verdicts v JOIN candidates c ON c.id = v.candidate_id "
                          "WHERE c.run_id = ? ORDER BY c.iteration, c.slot", run_id)
        return [_verdict(r) for r in rows]

    # kept engines and lessons

    def kept_engines(self, run_id: str | None = None) -> list[KeptEngine]:
        if run_id is None:
            return [_kept(r) for r in self._rows("SELECT * FROM kept_engines ORDER BY created_at, id")]
        return [_kept(r) for r in self._rows("SELECT * FROM kept_engines WHERE run_id = ? ORDER BY id", run_id)]

    def kept_engine(self, engine_id: str) -> KeptEngine:
        rows = self._rows("SELECT * FROM kept_engines WHERE id = ?", engine_id)
        if not rows:
            raise KeyError(f"no kept engine {engine_id!r} in {self.path}; `swarm kb list` shows the kept engines")
        return _kept(rows[0])

    def add_lesson(self, lesson: LessonRecord) -> None:
        with self._transaction() as db:
            _insert_lesson(db, lesson)

    def lessons(self, architecture: str | None = None, limit: int = 1000) -> list[LessonRecord]:
        """Most recent last."""
        select = ("SELECT lessons.*, coalesce(verdicts.status, '') AS verdict FROM lessons "
                  "LEFT JOIN verdicts ON verdicts.candidate_id = lessons.candidate_id")
        if architecture is None:
            rows = self._rows(f"{select} ORDER BY id DESC LIMIT ?", limit)
        else:
            rows = self._rows(f"{select} WHERE architecture = ? ORDER BY id DESC LIMIT ?", architecture, limit)
        return [LessonRecord(**dict(r)) for r in reversed(rows)]


def _insert_candidate(db: sqlite3.Connection, c: CandidateRecord) -> None:
    db.execute("INSERT INTO candidates VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", (
        c.id, c.run_id, c.iteration, c.slot, c.parent_id, c.parent_commit, c.agent, c.title, c.rationale,
        c.proposal_json, c.git_commit, c.state.value, c.cost_usd, c.created_at))


def _insert_verdict(db: sqlite3.Connection, v: VerdictRecord) -> None:
    f = v.figures
    db.execute("INSERT INTO verdicts VALUES (?,?,?,?,?,?,?,?,?,?,?)", (
        v.candidate_id, v.status, v.summary, v.evidence_json, v.verdict_json, f.frames_per_s, f.ttfa_ms, f.rtf,
        f.speedup, v.eval_seconds, v.created_at or _now()))


def _insert_lesson(db: sqlite3.Connection, lesson: LessonRecord) -> None:
    db.execute("INSERT INTO lessons (run_id, candidate_id, feature, outcome, summary, evidence, architecture, "
               "created_at) VALUES (?,?,?,?,?,?,?,?)", (
                   lesson.run_id, lesson.candidate_id, lesson.feature, lesson.outcome, lesson.summary,
                   lesson.evidence, lesson.architecture, lesson.created_at or _now()))


def _insert_kept(db: sqlite3.Connection, k: KeptEngine) -> None:
    f = k.figures
    db.execute(f"INSERT INTO kept_engines VALUES ({','.join('?' * (4 + len(_KEY) + len(_FIGURES) + 3))})", (
        k.id, k.run_id, k.parent_id, k.git_commit, *(getattr(k.key, name) for name in _KEY),
        f.frames_per_s, f.ttfa_ms, f.rtf, f.speedup, k.speedup_vs_reference, k.title, k.created_at or _now()))


def _run(r: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=r["id"], target_name=r["target_name"], target_json=r["target_json"],
        baseline_request=r["baseline_request"], baseline_id=r["baseline_id"], baseline_commit=r["baseline_commit"],
        engine_key=EngineKey(**json.loads(r["engine_key_json"])), secret=r["secret"], state=RunState(r["state"]),
        stop_reason=r["stop_reason"], calibration_json=r["calibration_json"],
        baseline_figures=Figures(**json.loads(r["baseline_figures_json"])), elapsed_s=r["elapsed_s"],
        spent_usd=r["spent_usd"],
        started_at=r["started_at"], finished_at=r["finished_at"])


def _candidate(r: sqlite3.Row) -> CandidateRecord:
    return CandidateRecord(**{**dict(r), "state": CandidateState(r["state"])})


def _verdict(r: sqlite3.Row) -> VerdictRecord:
    return VerdictRecord(
        candidate_id=r["candidate_id"], status=r["status"], summary=r["summary"], evidence_json=r["evidence_json"],
        verdict_json=r["verdict_json"], figures=_figures(r), eval_seconds=r["eval_seconds"], created_at=r["created_at"])


def _kept(r: sqlite3.Row) -> KeptEngine:
    return KeptEngine(
        id=r["id"], run_id=r["run_id"], parent_id=r["parent_id"], git_commit=r["git_commit"],
        key=EngineKey(**{k: r[k] for k in _KEY}), figures=_figures(r),
        speedup_vs_reference=r["speedup_vs_reference"], title=r["title"], created_at=r["created_at"])
