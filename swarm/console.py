"""The one rich Console (stderr), logging setup, and the live progress panel of `swarm run`.

Only the CLI calls `setup_logging()` and builds a `LiveProgress`; library code logs and emits events.
"""
from __future__ import annotations

import logging
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.logging import RichHandler
from rich.table import Table
from rich.text import Text

from targets import Target

from . import events as ev

console = Console(stderr=True)

_STATUS_STYLE = {"pass": "bold green", "slower": "yellow", "noisy": "yellow", "edit_error": "magenta",
                 "agent_error": "magenta", "duplicate": "magenta", "rejected": "magenta"}


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(console=console, show_path=False)], force=True)


def status_text(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, "red"))


def _goal(value: float | None, goal: float | None, op: str, fmt: str) -> str:
    shown = "-" if value is None else format(value, fmt)
    return shown if goal is None else f"{shown} (goal {op} {goal:g})"


class LiveProgress:
    """An event listener that redraws a small panel: iteration, candidates in flight, best so far, spend. Where
    the output is not a terminal (a log file, cron, `timeout` on a lent machine) it prints a line per event
    instead, as it happens: a panel there is drawn once, at exit, and a killed run would leave no log at all."""

    def __init__(self, target: Target, max_recent: int = 6, out: Console = console):
        self.target = target
        self.out = out
        self.max_recent = max_recent
        self.run_id = ""
        self.iteration = 0
        self.in_flight: set[str] = set()
        self.evaluated = 0
        self.best: ev.EngineKept | None = None
        self.spend: ev.SpendUpdated | None = None
        self.recent: list[ev.EvaluationFinished | ev.CandidateProposed] = []
        self.notes: list[str] = []
        self._live = Live(self.render(), console=out, refresh_per_second=4, transient=False) \
            if out.is_terminal else None
        self._last_line = ""

    def __enter__(self) -> LiveProgress:
        if self._live:
            self._live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live:
            self._live.__exit__(exc_type, exc, tb)

    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted():
                self.run_id = event.run_id
                self.notes.append(f"{'resumed' if event.resumed else 'started'} {event.run_id}, "
                                  f"baseline {event.baseline_id}")
            case ev.BaselineChecked() | ev.NoiseCalibrated():
                self.notes.append(event.summary)
            case ev.IterationStarted():
                self.iteration = event.iteration
            case ev.CandidateProposed() if event.error:
                self.recent.append(event)
            case ev.EvaluationStarted():
                self.in_flight.add(event.candidate_id)
            case ev.EvaluationFinished():
                self.in_flight.discard(event.candidate_id)
                self.evaluated += 1
                self.recent.append(event)
            case ev.EngineKept():
                if self.best is None or event.speedup_vs_baseline > self.best.speedup_vs_baseline:
                    self.best = event
            case ev.SpendUpdated():
                self.spend = event
            case ev.RunStopped():
                self.notes.append(f"stopped: {event.reason}")
        self.recent = self.recent[-self.max_recent:]
        self.notes = self.notes[-3:]
        if self._live:
            self._live.update(self.render())
        elif (line := _line(event)) and line != self._last_line:  # the loop reports the same spend twice at the end
            self._last_line = line
            self.out.print(f"[{event.time[11:19]}] {line}", highlight=False, markup=False, soft_wrap=True)

    def render(self) -> Group:
        t, budget = self.target, self.target.budget
        head = Table.grid(padding=(0, 2))
        head.add_row("run", self.run_id or "-", "iteration", f"{self.iteration}/{budget.iterations}",
                     "in flight", str(len(self.in_flight)), "evaluated", str(self.evaluated))
        best = self.best
        head.add_row("best", f"{best.speedup_vs_baseline:.3f}x baseline ({best.candidate_id})" if best else "-",
                     "frames/s", _goal(best.frames_per_s if best else None, t.acceptance.frames_per_s, ">=", ".1f"),
                     "TTFA ms", _goal(best.ttfa_ms if best else None, t.acceptance.ttfa_ms, "<=", ".2f"), "", "")
        if self.spend:
            s = self.spend
            dollars = f"${s.dollars:.2f}" + (f"/{budget.dollars:g}" if budget.dollars else "")
            gpu = f"{s.gpu_hours:.3f}" + (f"/{budget.gpu_hours:g}" if budget.gpu_hours else "")
            head.add_row("spend", dollars, "device h", gpu, "wall min", f"{s.wall_minutes:.1f}/{budget.wall_minutes:g}",
                         "", "")
        recent = Table(show_header=True, header_style="dim", box=None, padding=(0, 1))
        recent.add_column("candidate")
        recent.add_column("status")
        recent.add_column("speedup", justify="right")
        recent.add_column("summary", overflow="ellipsis", no_wrap=True, max_width=70)
        for e in self.recent:
            if isinstance(e, ev.EvaluationFinished):
                speedup = f"{e.speedup:.3f}x" if e.speedup else "-"
                recent.add_row(e.candidate_id, status_text(e.status), speedup, e.summary)
            else:
                recent.add_row(e.candidate_id, status_text("rejected"), "-", e.error.splitlines()[0][:200])
        return Group(head, recent, *(Text(n, style="dim") for n in self.notes))


def _line(event: ev.Event) -> str:
    """One log line for an event worth a line (an evaluation's start is its proposal's line)."""
    match event:
        case ev.RunStarted():
            return f"{'resumed' if event.resumed else 'started'} {event.run_id} ({event.target}), baseline " \
                   f"{event.baseline_id}"
        case ev.BaselineChecked() | ev.NoiseCalibrated():
            return event.summary
        case ev.IterationStarted():
            return f"iteration {event.iteration}: {event.slots} candidates on {event.parent_id}"
        case ev.CandidateProposed():
            return f"{event.candidate_id} by {event.agent}: " + (
                f"rejected: {event.error.splitlines()[0][:200]}" if event.error else event.title)
        case ev.EvaluationFinished():
            speedup = f" {event.speedup:.3f}x" if event.speedup else ""
            return f"{event.candidate_id} {event.status}{speedup} in {event.seconds:.0f} s: {event.summary}"
        case ev.EngineKept():
            fps = "-" if event.frames_per_s is None else f"{event.frames_per_s:.1f}"
            ttfa = "-" if event.ttfa_ms is None else f"{event.ttfa_ms:.1f}"
            return f"kept {event.candidate_id}: {event.speedup_vs_baseline:.3f}x the baseline, {fps} frames/s, " \
                   f"TTFA {ttfa} ms"
        case ev.SpendUpdated():
            return f"spent: {event.iterations} iterations, {event.wall_minutes:.1f} wall min, " \
                   f"{event.gpu_hours:.3f} device h, ${event.dollars:.2f}"
        case ev.RunStopped():
            return f"stopped: {event.reason}"
    return ""
