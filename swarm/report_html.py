"""`swarm review RUN_ID --html OUT`: one self-contained HTML file (inline CSS and SVG, no scripts, no
matplotlib) with the best frames/s and TTFA per iteration, the kept engines' figures, evidence and diffs.
"""
from __future__ import annotations

from html import escape

from .review import IterationPoint, RunReview

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td.l{text-align:left}pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px}
.add{color:#116329;background:#dafbe1}.del{color:#82071e;background:#ffebe9}.hunk{color:#0550ae}
.plots{display:flex;gap:24px;flex-wrap:wrap}.muted{color:#666}
"""


def _line_plot(points: list[tuple[int, float]], title: str, unit: str, goal: float | None) -> str:
    """An SVG line chart of (iteration, value); an optional dashed goal line."""
    w, h, pad = 480, 220, 44
    if not points:
        return (f'<svg width="{w}" height="{h}"><text x="{pad}" y="{h / 2}">{escape(title)}: no measurements'
                "</text></svg>")
    xs = [p[0] for p in points]
    ys = [p[1] for p in points] + ([goal] if goal is not None else [])
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys) * 0.95, max(ys) * 1.05 if max(ys) > 0 else 1.0
    if y1 <= y0:
        y1 = y0 + 1

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (w - 2 * pad)

    def sy(y: float) -> float:
        return h - pad - (y - y0) / (y1 - y0) * (h - 2 * pad)

    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(points))
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3"><title>iteration {x}: {y:.4g} {unit}'
                   f"</title></circle>" for x, y in points)
    goal_line = ""
    if goal is not None:
        goal_line = (f'<line x1="{pad}" x2="{w - pad}" y1="{sy(goal):.1f}" y2="{sy(goal):.1f}" stroke="#c33" '
                     f'stroke-dasharray="5,4"/><text x="{w - pad}" y="{sy(goal) - 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="#c33">goal {goal:g}</text>')
    ticks = "".join(f'<text x="{sx(x):.1f}" y="{h - pad + 16}" text-anchor="middle" font-size="11">{x}</text>'
                    for x in sorted(set(xs)))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">'
            f'<text x="{w / 2}" y="18" text-anchor="middle" font-weight="bold">{escape(title)}</text>'
            f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>'
            f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>'
            f'<text x="{pad - 6}" y="{sy(y1):.1f}" text-anchor="end" font-size="11">{y1:.4g}</text>'
            f'<text x="{pad - 6}" y="{sy(y0):.1f}" text-anchor="end" font-size="11">{y0:.4g}</text>'
            f'<text x="{w / 2}" y="{h - 6}" text-anchor="middle" font-size="11">iteration</text>{ticks}{goal_line}'
            f'<path d="{path}" fill="none" stroke="#0969da" stroke-width="2"/>{dots}</svg>')


def _series(points: list[IterationPoint], field: str) -> list[tuple[int, float]]:
    return [(p.iteration, getattr(p.figures, field)) for p in points if getattr(p.figures, field) is not None]


def _diff_html(diff: str) -> str:
    rows = []
    for line in diff.splitlines():
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        rows.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return "<pre>" + "\n".join(rows) + "</pre>"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_html(review: RunReview, acceptance_fps: float | None = None, acceptance_ttfa: float | None = None) -> str:
    run = review.run
    counts = ", ".join(f"{n} {escape(s)}" for s, n in sorted(review.status_counts.items())) or "none"
    base = review.baseline.figures
    rows = [f"<tr><td>{escape(review.baseline.id)} (baseline)</td><td class=l></td><td>1.000x</td><td></td>"
            f"<td>{_fmt(base.frames_per_s, '.1f')}</td><td>{_fmt(base.ttfa_ms, '.2f')}</td>"
            f"<td>{_fmt(base.rtf, '.4f')}</td></tr>"]
    sections = []
    for r in review.kept:
        c, f = r.verdict.comparison, r.kept.figures
        ci = escape(c.bar()) if c else "-"
        rows.append(f"<tr><td>{escape(r.kept.id)}</td><td class=l>{escape(r.kept.title)}</td>"
                    f"<td>{r.speedup_vs_baseline:.3f}x</td><td>{ci}</td><td>{_fmt(f.frames_per_s, '.1f')}</td>"
                    f"<td>{_fmt(f.ttfa_ms, '.2f')}</td><td>{_fmt(f.rtf, '.4f')}</td></tr>")
        evidence = "".join(f"<li><b>{escape(e.check)}</b>: {escape(e.message)}</li>" for e in r.verdict.evidence)
        stages = ", ".join(f"{escape(k)} {v:.1f} s" for k, v in r.verdict.stage_seconds.items())
        busy = ", ".join(f"{escape(k)} {v:.1f} s" for k, v in r.verdict.engine_seconds.items())
        sections.append(
            f"<h2>{escape(r.kept.id)}: {escape(r.kept.title)}</h2>"
            f"<p class=muted>agent {escape(r.candidate.agent)} · parent {escape(r.kept.parent_id)} · commit "
            f"<code>{r.kept.git_commit[:12]}</code> · {r.speedup_vs_baseline:.3f}x baseline</p>"
            f"<p>{escape(r.candidate.rationale)}</p><p><b>verdict</b> {escape(r.verdict.status.value)}: "
            f"{escape(r.verdict.summary)}</p><p class=muted>stages: {stages or '-'}; engines busy: {busy or '-'}</p>"
            f"<ul>{evidence}</ul>{_diff_html(r.diff)}")
    plots = (_line_plot(_series(review.points, "frames_per_s"), "best frames/s (p50)", "frames/s", acceptance_fps)
             + _line_plot(_series(review.points, "ttfa_ms"), "TTFA of the best engine (p50, ms)", "ms",
                          acceptance_ttfa))
    return (f"<!doctype html><html><head><meta charset=utf-8><title>swarm review {escape(run.id)}</title>"
            f"<style>{_CSS}</style></head><body><h1>swarm review: {escape(run.id)}</h1>"
            f"<p>target <b>{escape(run.target_name)}</b> · baseline {escape(run.baseline_id)} · "
            f"{escape(run.engine_key.hardware)}, {escape(run.engine_key.software)}<br>stop: "
            f"{escape(run.stop_reason or run.state.value)} · candidates: {counts}</p>"
            f"<div class=plots>{plots}</div><table><tr><th>engine</th><th>title</th><th>speedup</th>"
            f"<th>CI vs parent</th><th>frames/s</th><th>TTFA ms</th><th>RTF</th></tr>{''.join(rows)}</table>"
            f"{''.join(sections) or '<p>No engine was kept in this run.</p>'}</body></html>")
