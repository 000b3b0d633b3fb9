"""What happens during a run, as typed events: appended to $SWARM_HOME/runs/RUN_ID/events.jsonl for machines
and passed to listeners (the live console) for humans. The knowledge base, not this log, is the run's state.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    time: str = Field(default_factory=_now)
    run_id: str


class RunStarted(_Event):
    kind: Literal["run_started"] = "run_started"
    target: str
    baseline_id: str
    resumed: bool
    iterations: int  # the budget's iteration cap


class BaselineChecked(_Event):
    kind: Literal["baseline_checked"] = "baseline_checked"
    engine_id: str
    ok: bool
    summary: str


class NoiseCalibrated(_Event):
    kind: Literal["noise_calibrated"] = "noise_calibrated"
    summary: str


class IterationStarted(_Event):
    kind: Literal["iteration_started"] = "iteration_started"
    iteration: int
    parent_id: str
    slots: int


class CandidateProposed(_Event):
    kind: Literal["candidate_proposed"] = "candidate_proposed"
    candidate_id: str
    agent: str
    title: str
    error: str = ""  # the edit or agent error when the proposal never became an engine


class EvaluationStarted(_Event):
    kind: Literal["evaluation_started"] = "evaluation_started"
    candidate_id: str


class EvaluationFinished(_Event):
    kind: Literal["evaluation_finished"] = "evaluation_finished"
    candidate_id: str
    status: str
    summary: str
    seconds: float
    speedup: float | None = None


class EngineKept(_Event):
    kind: Literal["engine_kept"] = "engine_kept"
    candidate_id: str
    title: str
    speedup_vs_baseline: float
    frames_per_s: float | None
    ttfa_ms: float | None


class SpendUpdated(_Event):
    kind: Literal["spend_updated"] = "spend_updated"
    iterations: int
    wall_minutes: float
    gpu_hours: float
    dollars: float


class RunStopped(_Event):
    kind: Literal["run_stopped"] = "run_stopped"
    reason: str


Event = (RunStarted | BaselineChecked | NoiseCalibrated | IterationStarted | CandidateProposed | EvaluationStarted
         | EvaluationFinished | EngineKept | SpendUpdated | RunStopped)
Listener = Callable[[Event], None]


class EventLog:
    """Appends each event as one JSON line (flushed, so a killed run keeps its log) and notifies listeners."""

    def __init__(self, path: Path, listeners: list[Listener] | None = None):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.listeners = list(listeners or [])
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def emit(self, event: Event) -> None:
        with self._lock:
            self._file.write(event.model_dump_json() + "\n")
            self._file.flush()
            for listener in self.listeners:
                listener(event)

    def close(self) -> None:
        self._file.close()


def read_events(path: Path) -> list[Event]:
    from pydantic import TypeAdapter

    adapter = TypeAdapter(Event)
    return [adapter.validate_json(line) for line in path.read_text().splitlines() if line.strip()]
