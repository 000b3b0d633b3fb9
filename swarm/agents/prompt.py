"""Renders the LLM prompts from the templates in `swarm/prompts/*.md` and a ProposalContext."""
from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path
from string import Template

from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.renew import renewal

from ..proposal import Lesson, ProposalContext

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"


@cache
def _template(name: str) -> Template:
    return Template((PROMPTS_DIR / f"{name}.md").read_text())


def system_prompt() -> str:
    return _template("system").substitute(edit_format=_template("edit_format").template)


class PromptTooLong(ValueError):
    """The prompt does not fit its budget even with no engine file shown."""


def proposal_prompt(context: ProposalContext, max_chars: int | None = None) -> str:
    """With `max_chars`, the engine files shown are those that fit in it (see _files)."""
    hardware = context.device if context.gpu is None else f"{context.device} ({context.gpu})"
    fields = dict(
        target_name=context.target_name,
        model_config_name=context.model_config_name,
        hardware=hardware,
        parent_id=context.parent_id,
        iteration=context.iteration,
        slot=context.slot,
        parent_figures=context.parent_figures or "(not measured yet)",
        acceptance=context.acceptance or "(none)",
        failures=_bullets(context.failures),
        lessons=_lessons(context.lessons),
        applied_transforms=_bullets([_applied(name) for name in context.applied_transforms]),
        device=context.device,
        renewals=_renewals(context),
        catalogue=_catalogue(context),
    )
    if max_chars is None:
        return _template("proposal").substitute(fields, files=_files(context.parent_files))
    room = max_chars - len(_template("proposal").substitute(fields, files=""))
    files = _files(context.parent_files, room, context.parent_figures)
    if len(files) > room:
        raise PromptTooLong(f"the proposal prompt needs {max_chars - room + len(files)} characters with no engine "
                            f"file shown, over the {max_chars} its budget allows")
    return _template("proposal").substitute(fields, files=files)


def repair_prompt(error: str) -> str:
    return _template("repair").substitute(error=error, edit_format=_template("edit_format").template)


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items) if items else "(none)"


def _lessons(lessons: list[Lesson]) -> str:
    if not lessons:
        return "(none yet)"
    by_feature: dict[str, list[Lesson]] = {}
    for lesson in lessons:
        by_feature.setdefault(lesson.feature, []).append(lesson)
    parts = []
    for feature in sorted(by_feature):
        parts.append(f"### {feature}")
        for lesson in by_feature[feature]:
            evidence = f" (evidence: {lesson.evidence})" if lesson.evidence else ""
            parts.append(f"- [{lesson.outcome}] {lesson.summary}{evidence}")
    return "\n".join(parts)


def _applied(name: str) -> str:
    """A lineage entry; for a transform with knobs, where its parameters live, so that retuning is an edit."""
    t = TRANSFORMS.get(name)
    if t is None or not t.knobs:
        return name
    knobs = "; ".join(f"{t.knobs.constant(param)} in {t.knobs.path} (tried: {list(t.space[param])})"
                      for param in t.knobs.notes)
    return f"{name}: its tuning constants are {knobs}"


def _renewals(context: ProposalContext) -> str:
    """Each lineage transform whose kernel files changed since the engine took them, as the diff that brings them
    to today's version: a kept engine cannot take a transform again, so a faster kernel reaches it only so."""
    parts = []
    for name in dict.fromkeys(context.applied_transforms):
        found = renewal(TRANSFORMS[name], context.parent_files) if name in TRANSFORMS else None
        if found is None:
            continue
        diff = "".join(line for patch in found.patches for line in difflib.unified_diff(
            patch.search.splitlines(keepends=True), patch.replace.splitlines(keepends=True),
            f"a/{patch.path}", f"b/{patch.path}"))
        parts.append(f"### `{name}`: today's version {found.version} (the tuning constants return to their "
                     f"defaults)\n````diff\n{diff}````")
    return "\n\n".join(parts) or "(none)"


def _catalogue(context: ProposalContext) -> str:
    lines = []
    for t in TRANSFORMS.values():
        if context.device in t.devices and t.name not in context.applied_transforms:
            space = "; ".join(f"{k} in {list(v)}" for k, v in t.space.items())
            proven = "; proven on this device" if context.device in t.proven else ""
            lines.append(f"- `{t.name}` ({t.feature}{'; ' + space if space else ''}{proven}): {t.summary}."
                         + (f" {t.lesson}" if t.lesson else ""))
    return "\n".join(lines) or "(none)"


def _files(files: dict[str, str], room: int | None = None, hot: str = "") -> str:
    """Every file in full; with `room` (characters) and over it, the files that fit, chosen by relevance
    (_by_relevance), and the others listed by name and line count."""
    blocks = {path: _block(path, source) for path, source in sorted(files.items())}
    shown = list(blocks)
    if room is not None and len("\n\n".join(blocks.values())) > room:
        shown, used = [], 0
        for path in _by_relevance(files, hot):
            omitted = [p for p in blocks if p not in shown and p != path]
            if used + len(blocks[path]) + 2 + len(_omitted(files, omitted)) <= room:
                shown.append(path)
                used += len(blocks[path]) + 2
    text = "\n\n".join(blocks[p] for p in blocks if p in shown)
    rest = [p for p in blocks if p not in shown]
    return text + ("\n\n" if text and rest else "") + _omitted(files, rest)


def _block(path: str, source: str) -> str:
    # Four backticks so that triple-backtick strings inside the sources cannot close the fence.
    lang = "python" if path.endswith(".py") else ""
    body = source if source.endswith("\n") else source + "\n"
    return f"### {path}\n````{lang}\n{body}````"


def _omitted(files: dict[str, str], paths: list[str]) -> str:
    if not paths:
        return ""
    listed = ", ".join(f"{p} ({files[p].count(chr(10))} lines)" for p in paths)
    return (f"Not shown, for this model's context window: {listed}. Edit only the files shown above (or create "
            "new ones): a SEARCH block must quote a file's text exactly.")


def _by_relevance(files: dict[str, str], hot: str) -> list[str]:
    """Files defining a function the parent's profile names (hottest first: the profile lists by time), then the
    others smallest first, so that more of them fit."""
    def first_mention(path: str) -> int:
        names = re.findall(r"^[ \t]*def (\w{8,})", files[path], re.MULTILINE)
        found = [m.start() for name in names if (m := re.search(rf"\b{re.escape(name)}\b", hot))]
        return min(found, default=len(hot) + 1)
    return sorted(files, key=lambda p: (first_mention(p), len(files[p]), p))
