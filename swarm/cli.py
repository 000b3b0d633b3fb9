"""The `swarm` command line (typer): run, eval, tolerances, review, kb, nightly. Thin: parse, call one library function,
render. Exit codes: 0 ok, 1 a candidate rejected or a harness error, 2 bad usage or configuration, 130 interrupted
(Ctrl-C or SIGTERM).
"""
from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evaluator import EvaluatorError, live_workers
from targets import Target, TargetError, load_target, with_agents, with_budget

from .agents.base import AgentError
from .baseline import BaselineError
from .console import LiveProgress, console, setup_logging, status_text
from .kb_views import export_kb, render_kb_list, render_kb_show
from .paths import kb_path, reference_engine_dir

# help texts are plain: "provider[/model]" is not rich markup
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="LLM agents write fast Drama 3 engines; a harness-owned evaluator decides what is kept.")
kb_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                     help="Inspect the knowledge base: runs, kept engines, lessons.")
app.add_typer(kb_app, name="kb")
out = Console()

_OVERRIDE = "instead of the target's budget.{}, for this run in all (what it spent before --resume counts)"
KbOption = Annotated[Path | None, typer.Option("--kb", help="knowledge base file [default: $SWARM_HOME/kb.sqlite]")]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logging")] = False) -> None:
    setup_logging(verbose)


@contextmanager
def _usage_errors() -> Iterator[None]:
    """Configuration mistakes print their message (which names the fix) and exit 2, without a traceback."""
    try:
        yield
    except (TargetError, BaselineError, AgentError, KeyError, FileNotFoundError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        console.print(f"[bold red]error:[/bold red] {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


@contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM (a job scheduler, `timeout`) kill every evaluator worker at once, then raise
    KeyboardInterrupt: the workers run in their own sessions, so neither signal reaches them. A verdict reaches
    the knowledge base only when its evaluation finished, so `--resume` runs the interrupted ones again."""
    def stop(signum: int, frame: object) -> None:
        live_workers.stop_all()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        console.print("[bold red]interrupted[/bold red]")
        raise typer.Exit(130) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _target(path: Path) -> Target:
    with _usage_errors():
        return load_target(path)


@app.command()
def run(target_file: Annotated[Path, typer.Argument(help="target YAML, e.g. targets/drama3_cpu.yaml")],
        resume: Annotated[str | None, typer.Option(help="continue this run id after a stop or crash")] = None,
        iterations: Annotated[int | None, typer.Option(help=_OVERRIDE.format("iterations"))] = None,
        wall_minutes: Annotated[float | None, typer.Option(help=_OVERRIDE.format("wall_minutes"))] = None,
        gpu_hours: Annotated[float | None, typer.Option(help=_OVERRIDE.format("gpu_hours"))] = None,
        dollars: Annotated[float | None, typer.Option(help=_OVERRIDE.format("dollars"))] = None,
        agents: Annotated[str | None, typer.Option(help="instead of the target's agents: provider[/model][:count], "
                                                        "comma-separated, e.g. offline:2")] = None,
        skip_pending: Annotated[bool, typer.Option(
            help="with --resume: record the interrupted iteration's unevaluated candidates as skipped instead of "
                 "evaluating them, and go on from the next iteration (for time-limited GPU leases)")] = False) -> None:
    """Search for faster engines for a target until its acceptance criteria hold or its budget is spent."""
    from .factory import build_swarm
    from .review import render_summary

    if skip_pending and not resume:
        raise typer.BadParameter("goes with --resume RUN_ID: a new run has nothing pending",
                                 param_hint="--skip-pending")
    with _usage_errors():
        target = with_agents(with_budget(_target(target_file), iterations=iterations, wall_minutes=wall_minutes,
                                         gpu_hours=gpu_hours, dollars=dollars), agents)
    progress = LiveProgress(target)
    with _usage_errors(), build_swarm(target, [progress]) as swarm, _interruptible():
        try:
            with progress:
                outcome = swarm.resume(resume, skip_pending) if resume else swarm.start()
        except (EvaluatorError, KeyboardInterrupt) as e:
            run_id = resume or progress.run_id
            interrupted = isinstance(e, KeyboardInterrupt)
            message = ("[bold red]interrupted[/bold red] (evaluations in flight are dropped and run again on resume, "
                       "or skipped with --skip-pending)") if interrupted \
                else f"[bold red]harness error:[/bold red] {escape(str(e))}"
            console.print(message, soft_wrap=True)
            if run_id:
                console.print(f"the run's state is saved; {'to go on' if interrupted else 'after fixing it'}: "
                              f"swarm run {target_file} --resume {run_id}", soft_wrap=True)
            raise typer.Exit(130 if interrupted else 1) from None
        render_summary(swarm.kb, outcome.run_id, out)


@app.command("eval")
def eval_(candidate_dir: Annotated[Path, typer.Argument(help="an engine package (a copy of reference_runtime/model/)")],
          target_file: Annotated[Path, typer.Option("--target", help="target YAML")],
          baseline: Annotated[Path | None, typer.Option(help="baseline engine dir [default: the reference]")] = None,
          calibration: Annotated[Path | None, typer.Option(
              help="A/A calibration JSON: read if it exists, else written there when a would-be win measures one "
                   "(valid for one baseline, target and machine)")] = None,
          ) -> None:
    """Judge one engine directory against a baseline: the correctness cascade, the interleaved benchmark, and for
    a would-be win the baseline's A/A noise floor (measured then, or kept in --calibration)."""
    from evaluator.one_off import CalibrationFileError, evaluate_one_off

    target = _target(target_file)
    with _usage_errors():
        baseline_dir = baseline or reference_engine_dir(target)
        if not candidate_dir.is_dir():
            raise FileNotFoundError(f"{candidate_dir}: not a directory; pass an engine package directory")
    with tempfile.TemporaryDirectory(prefix="swarm-eval-") as work, _interruptible():
        try:
            verdict = evaluate_one_off(candidate_dir, target, baseline_dir=baseline_dir, work_dir=Path(work),
                                       keep=calibration, say=lambda line: console.print(escape(line), highlight=False))
        except CalibrationFileError as e:
            console.print(f"[bold red]error:[/bold red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except EvaluatorError as e:
            console.print(f"[bold red]harness error:[/bold red] {escape(str(e))}", soft_wrap=True)
            raise typer.Exit(1) from None
    out.print(status_text(verdict.status.value), verdict.summary)
    for e in verdict.evidence:
        out.print(f"  {e.check}: {e.message}", highlight=False)
    if verdict.comparison:
        c = verdict.comparison
        out.print(f"  speedup {c.speedup:.3f}x (CI {c.ci_low:.3f}-{c.ci_high:.3f}, needs > {c.threshold:.3f}), "
                  f"TTFA ratio {c.ttfa_ratio:.3f}")
        if c.first_audio is not None:
            out.print(f"  {c.first_audio.describe()}")
    stages = ", ".join(f"{stage} {s:.1f}" for stage, s in verdict.stage_seconds.items())
    engines = ", ".join(f"{role} {s:.1f}" for role, s in verdict.engine_seconds.items())
    out.print(f"  seconds by stage: {stages}; engines busy: {engines}", highlight=False)
    raise typer.Exit(0 if verdict.status.value == "pass" else 1)


@app.command()
def tolerances(target_file: Annotated[Path, typer.Argument(help="target YAML")],
               prompts: Annotated[int, typer.Option(help="held-out prompts [default: the target's]")] = 0,
               frames: Annotated[int, typer.Option(help="teacher-forced frames each [default: the target's]")] = 0,
               seed: Annotated[int, typer.Option(help="prompt and sampling seed")] = 0,
               json_file: Annotated[Path | None, typer.Option("--json", help="also write the figures here")] = None,
               ) -> None:
    """Measure the teacher-forced gates: the reference against itself with its weights upcast one precision, and
    gates at twice those distances, as YAML to paste into the target."""
    import json
    from dataclasses import asdict

    from evaluator.tolerances import measure, recommend, report

    target = _target(target_file)
    with _interruptible():
        distances = measure(target, prompts or target.tolerances.prompts, frames or target.tolerances.frames, seed)
    gates = recommend(distances)
    out.print(report(target, distances, gates), highlight=False)
    if json_file:
        json_file.write_text(json.dumps({"target": target.name, "distances": asdict(distances),
                                         "recommended": asdict(gates)}, indent=2))


@app.command()
def review(run_id: str,
           html: Annotated[Path | None, typer.Option(help="also write a self-contained HTML report")] = None,
           kb: KbOption = None) -> None:
    """Kept engines of a run: diffs, figures against the baseline, correctness evidence."""
    from .factory import open_repo
    from .report_html import render_html
    from .review import build_review, render_review

    with _usage_errors(), _open(kb) as store:
        data = build_review(store, open_repo(), run_id)
        target = Target.model_validate_json(data.run.target_json)
    render_review(data, out)
    if html is not None:
        html.write_text(render_html(data, target.acceptance.frames_per_s, target.acceptance.ttfa_ms))
        console.print(f"wrote {html}")


@contextmanager
def _open(path: Path | None):
    from knowledge_base import KnowledgeStore

    store = KnowledgeStore(path or kb_path())
    try:
        yield store
    finally:
        store.close()


@kb_app.command("list")
def kb_list(kb: KbOption = None) -> None:
    """Runs and kept engines."""
    with _open(kb) as store:
        render_kb_list(store, out)


@kb_app.command("show")
def kb_show(item_id: Annotated[str, typer.Argument(help="a run, candidate or kept engine id")],
            kb: KbOption = None) -> None:
    """One run (its candidates and verdicts), candidate (proposal, verdict, evidence) or kept engine."""
    with _usage_errors(), _open(kb) as store:
        render_kb_show(store, item_id, out)


@kb_app.command("export")
def kb_export(as_json: Annotated[bool, typer.Option("--json", help="one JSON document instead of JSON lines")] = False,
              kb: KbOption = None) -> None:
    """Every record, as JSON lines ({"table": ..., "record": ...}) or one JSON document."""
    with _open(kb) as store:
        print(export_kb(store, as_json))


@app.command()
def nightly(target_files: Annotated[list[Path], typer.Argument(help="target YAML files")],
            budget_gpu_hours: Annotated[float, typer.Option(help="device hours per target")]) -> None:
    """Resume improvement from each target's best kept engine; write $SWARM_HOME/nightly/DATE/report.md."""
    if budget_gpu_hours <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--budget-gpu-hours")
    from .factory import build_swarm
    from .nightly import run_nightly

    with _interruptible():
        report = run_nightly(target_files, budget_gpu_hours, lambda target: build_swarm(target))
    table = Table(title=f"nightly {report.day}")
    for name in ("target", "run", "kept", "best speedup", "result"):
        table.add_column(name)
    for e in report.entries:
        result = "[red]harness error[/red]" if e.error else e.stop_reason
        table.add_row(e.target_name or e.target_file, e.run_id or "-", str(e.kept), f"{e.best_speedup:.3f}x", result)
    out.print(table)
    out.print(f"report: {report.directory / 'report.md'}")
    raise typer.Exit(0 if report.ok else 1)


if __name__ == "__main__":
    app()
