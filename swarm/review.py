"""`swarm review RUN_ID`: the run's kept engines with their diffs, figures against the baseline and the
correctness evidence, rendered with rich (the HTML report in `report_html.py` reads the same RunReview).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from candidates import EngineRepo
from evaluator.verdict import Verdict
from knowledge_base import CandidateRecord, Figures, KeptEngine, KnowledgeStore, RunRecord

from .budget import raise_option
from .run_state import ParentEngine, RunView

TITLE_CHARS = 48  # of a title in the kept-engines table


@dataclass(frozen=True, slots=True)
class KeptReview:
    kept: KeptEngine
    candidate: CandidateRecord
    verdict: Verdict
    diff: str  # against its parent engine
    speedup_vs_baseline: float


@dataclass(frozen=True, slots=True)
class IterationPoint:
    iteration: int
    best_id: str
    figures: Figures  # of the best engine after this iteration


@dataclass(frozen=True, slots=True)
class RunReview:
    run: RunRecord
    baseline: ParentEngine
    kept: list[KeptReview]
    status_counts: dict[str, int]
    points: list[IterationPoint]
    best: ParentEngine


def build_review(kb: KnowledgeStore, repo: EngineRepo, run_id: str) -> RunReview:
    view = RunView.load(kb, run_id)
    kept = []
    for k in view.kept:
        candidate = kb.candidate(k.id)
        verdict = Verdict.model_validate_json(view.verdicts[k.id].verdict_json)
        kept.append(KeptReview(k, candidate, verdict, repo.diff(candidate.parent_commit, k.git_commit),
                               view.speedup_vs_baseline(k)))
    kept.sort(key=lambda r: r.speedup_vs_baseline, reverse=True)
    last = max((c.iteration for c in view.candidates), default=0)
    points = []
    for i in range(1, last + 1):
        best = view.parent_for(i + 1)
        points.append(IterationPoint(i, best.id, best.figures))
    return RunReview(run=view.run, baseline=view.baseline, kept=kept,
                     status_counts=dict(Counter(v.status for v in view.verdicts.values())), points=points,
                     best=view.best())


def _kept_table(title: str, figures: tuple[str, ...]) -> Table:
    """Ids and figures never wrap: the ids are what `swarm kb`, `swarm review` and `--resume` take. Only the
    title gives way, cut short (`_cut`; `swarm review` prints each kept engine's title whole)."""
    table = Table(title=title)
    table.add_column("engine", no_wrap=True)
    table.add_column("title")
    for name in figures:
        table.add_column(name, justify="right", no_wrap=True)
    return table


def _cut(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[:TITLE_CHARS - 1] + "…"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def figures_table(review: RunReview) -> Table:
    table = _kept_table("kept engines vs the run's baseline",
                        ("speedup", "CI vs parent > threshold", "frames/s", "TTFA ms", "RTF"))
    base = review.baseline.figures
    table.add_row(review.baseline.id, "(the run's baseline)", "1.000x", "", _fmt(base.frames_per_s, ".1f"),
                  _fmt(base.ttfa_ms, ".2f"), _fmt(base.rtf, ".4f"))
    for r in review.kept:
        c, f = r.verdict.comparison, r.kept.figures
        ci = c.bar() if c else "-"
        table.add_row(r.kept.id, _cut(r.kept.title), f"{r.speedup_vs_baseline:.3f}x", ci,
                      _fmt(f.frames_per_s, ".1f"), _fmt(f.ttfa_ms, ".2f"), _fmt(f.rtf, ".4f"))
    return table


def evidence_table(verdict: Verdict) -> Table:
    table = Table(show_header=True, header_style="dim", box=None)
    for name in ("stage", "seconds"):
        table.add_column(name)
    for stage, seconds in verdict.stage_seconds.items():
        table.add_row(stage, f"{seconds:.1f}")
    for role, seconds in verdict.engine_seconds.items():
        table.add_row(f"{role} engine busy", f"{seconds:.1f}")
    if verdict.free_running_agreement_frames:
        table.add_row("free-running agreement (frames)", ", ".join(map(str, verdict.free_running_agreement_frames)))
    for e in verdict.evidence:
        table.add_row(e.check, e.message)
    return table


def render_review(review: RunReview, console: Console) -> None:
    run = review.run
    counts = ", ".join(f"{n} {status}" for status, n in sorted(review.status_counts.items()))
    console.print(Panel.fit(
        f"run {run.id}  target {run.target_name}  baseline {run.baseline_id}  state {run.state.value}\n"
        f"stop: {run.stop_reason or '-'}\ncandidates: {counts or 'none'}\n"
        f"hardware {run.engine_key.hardware}, {run.engine_key.software}", title="swarm review"))
    console.print(figures_table(review))
    if not review.kept:
        console.print("No engine was kept in this run: every candidate failed or was not faster beyond noise. "
                      f"`swarm kb show {run.id}` lists the verdicts.")
    for r in review.kept:
        console.rule(f"{r.kept.id}: {r.kept.title}  ({r.speedup_vs_baseline:.3f}x baseline)")
        console.print(f"agent {r.candidate.agent}; parent {r.kept.parent_id}; commit {r.kept.git_commit[:12]}")
        console.print(r.candidate.rationale)
        console.print(f"[bold]verdict[/bold] {r.verdict.status.value}: {r.verdict.summary}")
        console.print(evidence_table(r.verdict))
        console.print(Syntax(r.diff or "(empty diff)", "diff", theme="ansi_dark", word_wrap=True))


def render_summary(kb: KnowledgeStore, run_id: str, console: Console) -> None:
    """The closing lines of `swarm run`: kept engines with their speedup over the baseline, and what to run next."""
    view = RunView.load(kb, run_id)
    console.print(f"run {run_id} stopped: {view.run.stop_reason or view.run.state.value}")
    spent = raise_option(view.run.stop_reason)
    if spent:
        console.print(f"to continue it: `swarm run TARGET --resume {run_id} {spent} N` with N above what was spent "
                      "(or raise the target file's budget)")
    if not view.kept:
        console.print(f"no engine kept (baseline {view.baseline.id}); `swarm kb show {run_id}` lists the verdicts")
        return
    table = _kept_table(f"kept engines (baseline {view.baseline.id})", ("speedup vs baseline", "frames/s", "TTFA ms"))
    for k in sorted(view.kept, key=view.speedup_vs_baseline, reverse=True):
        table.add_row(k.id, _cut(k.title), f"{view.speedup_vs_baseline(k):.3f}x", _fmt(k.figures.frames_per_s, ".1f"),
                      _fmt(k.figures.ttfa_ms, ".2f"))
    console.print(table)
    console.print(f"review: swarm review {run_id} --html {run_id}.html")
