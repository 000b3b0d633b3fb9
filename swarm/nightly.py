"""`swarm nightly TARGETS... --budget-gpu-hours N`: for each target, a new run from its best kept engine
(re-verified) under that GPU-hour budget, then a dated report in $SWARM_HOME/nightly/YYYY-MM-DD/.

A target that finds nothing is a result; only harness errors (bad target file, crash in the harness) fail.
"""
from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from targets import Target, TargetError, load_target

from .loop import RunOutcome, Swarm
from .paths import nightly_dir
from .report_html import render_html
from .review import RunReview, build_review

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NightlyEntry:
    target_file: str
    target_name: str = ""
    run_id: str = ""
    stop_reason: str = ""
    kept: int = 0
    best_speedup: float = 1.0  # best kept engine vs this run's baseline
    baseline_id: str = ""
    error: str = ""  # a harness error; "" when the run completed


@dataclass(slots=True)
class NightlyReport:
    day: str
    directory: Path
    entries: list[NightlyEntry] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(e.error for e in self.entries)


def nightly_target(target: Target, budget_gpu_hours: float) -> Target:
    """The target as nightly runs it: from its best kept engine, capped at the nightly GPU-hour budget."""
    data = target.model_dump()
    data["baseline"] = "best"
    data["budget"]["gpu_hours"] = budget_gpu_hours
    return Target.model_validate(data)


def run_nightly(target_files: list[Path], budget_gpu_hours: float, open_swarm: Callable[[Target], Swarm],
                day: str | None = None) -> NightlyReport:
    day = day or date.today().isoformat()
    report = NightlyReport(day, nightly_dir() / day)
    report.directory.mkdir(parents=True, exist_ok=True)
    for path in target_files:
        try:
            target = nightly_target(load_target(path), budget_gpu_hours)
        except TargetError as e:
            report.entries.append(NightlyEntry(str(path), error=str(e)))
            continue
        try:
            with open_swarm(target) as swarm:
                outcome = swarm.start()
                review = build_review(swarm.kb, swarm.repo, outcome.run_id)
        except Exception:  # a harness failure on one target must not cost the others their night
            log.exception("nightly: %s failed", path)
            report.entries.append(NightlyEntry(str(path), target.name, error=traceback.format_exc(limit=8)))
            continue
        report.entries.append(_entry(path, target, outcome, review))
        (report.directory / f"{outcome.run_id}.html").write_text(
            render_html(review, target.acceptance.frames_per_s, target.acceptance.ttfa_ms))
    (report.directory / "report.md").write_text(render_markdown(report))
    return report


def _entry(path: Path, target: Target, outcome: RunOutcome, review: RunReview) -> NightlyEntry:
    best = max((r.speedup_vs_baseline for r in review.kept), default=1.0)
    return NightlyEntry(str(path), target.name, outcome.run_id, outcome.stop_reason, len(review.kept), best,
                        review.baseline.id)


def render_markdown(report: NightlyReport) -> str:
    lines = [f"# swarm nightly {report.day}", "", "| target | run | baseline | kept | best speedup | stop |",
             "|---|---|---|---|---|---|"]
    for e in report.entries:
        if e.error:
            lines.append(f"| {e.target_name or e.target_file} | - | - | - | - | harness error (below) |")
        else:
            lines.append(f"| {e.target_name} | {e.run_id} | {e.baseline_id} | {e.kept} | {e.best_speedup:.3f}x "
                         f"| {e.stop_reason} |")
    for e in report.entries:
        if e.error:
            lines += ["", f"## {e.target_file}: harness error", "", "```", e.error.rstrip(), "```"]
    reviews = [e for e in report.entries if e.run_id]
    if reviews:
        lines += ["", "Reviews: " + ", ".join(f"[{e.run_id}]({e.run_id}.html)" for e in reviews)]
    return "\n".join(lines) + "\n"
