"""`swarm kb list|show|export`: the knowledge base as tables for humans and JSON for machines."""
from __future__ import annotations

import json
from dataclasses import asdict
from enum import Enum

from rich.console import Console
from rich.table import Table

from knowledge_base import KnowledgeStore

from .console import status_text


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_kb_list(kb: KnowledgeStore, console: Console) -> None:
    runs = Table(title=f"runs ({kb.path})")
    for name in ("run", "target", "baseline", "state", "candidates", "kept", "stop"):
        runs.add_column(name)
    for r in kb.runs():
        runs.add_row(r.id, r.target_name, r.baseline_id, r.state.value, str(len(kb.candidates(r.id))),
                     str(len(kb.kept_engines(r.id))), r.stop_reason)
    console.print(runs)
    kept = Table(title="kept engines")
    for name in ("engine", "title", "model", "hardware", "software", "x reference", "frames/s", "TTFA ms"):
        kept.add_column(name)
    for k in kb.kept_engines():
        kept.add_row(k.id, k.title, k.key.model_config, k.key.hardware, k.key.software,
                     f"{k.speedup_vs_reference:.3f}", _fmt(k.figures.frames_per_s, ".1f"),
                     _fmt(k.figures.ttfa_ms, ".2f"))
    console.print(kept)


def render_kb_show(kb: KnowledgeStore, item_id: str, console: Console) -> None:
    """A run id shows its candidates; a candidate id its proposal and verdict; raises KeyError for unknown ids."""
    if any(r.id == item_id for r in kb.runs()):
        run = kb.run(item_id)
        console.print(f"run {run.id}: target {run.target_name}, baseline {run.baseline_id} "
                      f"({run.baseline_commit[:12]}), "
                      f"{run.state.value}, {run.stop_reason or 'running'}; {run.engine_key.hardware}, "
                      f"{run.engine_key.software}; spent ${run.spent_usd:.2f}, {run.elapsed_s / 60:.1f} min")
        table = Table()
        for name in ("candidate", "agent", "title", "status", "speedup", "summary"):
            table.add_column(name)
        for c in kb.candidates(item_id):
            v = kb.verdict(c.id)
            table.add_row(c.id, c.agent, c.title, status_text(v.status) if v else c.state.value,
                          _fmt(v.figures.speedup if v else None, ".3f"), v.summary if v else "")
        console.print(table)
        return
    candidate = kb.candidate(item_id)
    verdict = kb.verdict(item_id)
    console.print(f"candidate {candidate.id} (run {candidate.run_id}, iteration {candidate.iteration}, slot "
                  f"{candidate.slot}) by {candidate.agent}, parent {candidate.parent_id}, commit "
                  f"{candidate.git_commit[:12] or '-'}, ${candidate.cost_usd:.4f}")
    console.print(f"[bold]{candidate.title}[/bold]\n{candidate.rationale}")
    if verdict is None:
        console.print(f"state: {candidate.state.value} (no verdict yet)")
        return
    console.print(status_text(verdict.status), verdict.summary)
    for e in json.loads(verdict.evidence_json):
        console.print(f"  {e.get('check')}: {e.get('message')}", highlight=False)
    if any(k.id == item_id for k in kb.kept_engines(candidate.run_id)):
        k = kb.kept_engine(item_id)
        console.print(f"kept: {k.speedup_vs_reference:.3f}x the reference, key {asdict(k.key)}")


def _plain(record) -> dict:
    return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(record).items()}


def export_kb(kb: KnowledgeStore, as_document: bool) -> str:
    tables: dict[str, list[dict]] = {"runs": [], "candidates": [], "verdicts": [], "kept_engines": [], "lessons": []}
    for run in kb.runs():
        tables["runs"].append(_plain(run))
        tables["candidates"] += [_plain(c) for c in kb.candidates(run.id)]
        tables["verdicts"] += [_plain(v) for v in kb.verdicts(run.id)]
    tables["kept_engines"] = [_plain(k) for k in kb.kept_engines()]
    tables["lessons"] = [_plain(lesson) for lesson in kb.lessons()]
    if as_document:
        return json.dumps(tables, indent=2)
    return "\n".join(json.dumps({"table": name, "record": r}) for name, rows in tables.items() for r in rows)
