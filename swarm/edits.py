"""SEARCH/REPLACE edits: parse them from an agent's answer and apply them strictly to an engine package.

A block that does not match exactly once is an `EditError` with a located hint, never skipped; paths stay
inside the package; every edited `.py` file must still parse. The format is documented for agents in
`swarm/prompts/edit_format.md`.
"""
from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Protocol

from .proposal import FileEdit

SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE_MARK = ">>>>>>> REPLACE"
_FENCE = re.compile(r"^\s*```")


class PatchLike(Protocol):
    """A transform's edit (knowledge_base.transforms.base.Patch): the same three fields as a FileEdit."""

    path: str
    search: str
    replace: str


def patch_edits(patches: Iterable[PatchLike]) -> list[FileEdit]:
    """A transform's patches as edits, for the same strict path as an agent's."""
    return [FileEdit(path=p.path, search=p.search, replace=p.replace) for p in patches]


class EditError(ValueError):
    """An answer whose edits cannot be parsed or applied; the message is written to be fed back to the agent."""


def parse_edits(answer: str) -> list[FileEdit]:
    """Every SEARCH/REPLACE block in `answer`, in order; the file path is the last non-fence line before it."""
    lines = answer.splitlines(keepends=True)
    edits: list[FileEdit] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != SEARCH_MARK:
            i += 1
            continue
        block = len(edits) + 1
        path = _path_before(lines, i, block)
        search, i = _collect(lines, i + 1, DIVIDER, block, "the ======= divider")
        replace, i = _collect(lines, i + 1, REPLACE_MARK, block, "the >>>>>>> REPLACE marker")
        edits.append(FileEdit(path=path, search=search, replace=replace))
        i += 1
    if not edits:
        raise EditError(f"no edit blocks found: write each edit as a file path line, then {SEARCH_MARK}, "
                        f"the exact old lines, {DIVIDER}, the new lines, {REPLACE_MARK}")
    return edits


def _path_before(lines: list[str], start: int, block: int) -> str:
    for j in range(start - 1, -1, -1):
        text = lines[j].strip()
        if not text or _FENCE.match(text):
            continue
        path = text.strip("`*# ").removeprefix("File:").removeprefix("file:").strip().strip("`")
        if not path or " " in path or text.strip() in (DIVIDER, REPLACE_MARK):
            break
        return path
    raise EditError(f"edit block {block}: no file path line before {SEARCH_MARK}; put the path relative to "
                    "the engine package (e.g. moe.py) alone on the line above it")


def _collect(lines: list[str], start: int, marker: str, block: int, what: str) -> tuple[str, int]:
    for j in range(start, len(lines)):
        text = lines[j].strip()
        if text == marker:
            return "".join(lines[start:j]), j
        if text == SEARCH_MARK:
            break
    raise EditError(f"edit block {block}: missing {what}; every block is "
                    f"{SEARCH_MARK} / old lines / {DIVIDER} / new lines / {REPLACE_MARK}")


def check_path(path: str) -> str:
    """The normalised package-relative path, or EditError for anything that could leave the package."""
    p = PurePosixPath(path)
    if "\\" in path or p.is_absolute() or ".." in p.parts or not p.parts or path.startswith("~"):
        raise EditError(f"path {path!r} leaves the engine package: use a relative path inside it, e.g. 'moe.py'")
    if any(part.startswith(".") for part in p.parts) or "__pycache__" in p.parts:
        raise EditError(f"path {path!r} is a hidden or cache path: edit only the package's source files")
    return str(p)


def apply_edits(files: dict[str, str], edits: list[FileEdit]) -> dict[str, str]:
    """A new package (path -> source) with `edits` applied in order; `files` is left untouched.

    A SEARCH of a whole file with an empty REPLACE deletes the file. Raises EditError naming the file and block
    for a SEARCH that matches zero or several times, a bad path, an empty SEARCH on an existing file, or an edited
    .py file that no longer parses.
    """
    out = dict(files)
    touched: list[str] = []
    for block, edit in enumerate(edits, start=1):
        path = check_path(edit.path)
        where = f"edit block {block} ({path})"
        if edit.search == "":
            if path in out:
                raise EditError(f"{where}: empty SEARCH creates a file, but {path} exists; "
                                "copy the exact lines to change into SEARCH")
            out[path] = edit.replace
        elif edit.replace == "" and out.get(path) == edit.search:
            del out[path]  # the whole file as SEARCH and an empty REPLACE: the file goes
        else:
            if path not in out:
                raise EditError(f"{where}: no such file in the engine package (files: {', '.join(sorted(out))}); "
                                "to create a new file leave SEARCH empty")
            out[path] = _replace_once(out[path], edit.search, edit.replace, where)
        if path not in touched:
            touched.append(path)
    for path in touched:
        if path.endswith(".py") and path in out:
            _check_compiles(path, out[path])
    return out


def _replace_once(source: str, search: str, replace: str, where: str) -> str:
    count = source.count(search)
    if count == 1:
        return source.replace(search, replace, 1)
    if count > 1:
        starts = _match_lines(source, search)
        raise EditError(f"{where}: SEARCH matches {count} times (at lines {', '.join(map(str, starts))}); "
                        "include more surrounding lines so it matches exactly once")
    raise EditError(f"{where}: SEARCH does not match the file exactly. {_closest_hint(source, search)}")


def _match_lines(source: str, search: str) -> list[int]:
    starts, pos = [], source.find(search)
    while pos != -1:
        starts.append(source.count("\n", 0, pos) + 1)
        pos = source.find(search, pos + 1)
    return starts


def _closest_hint(source: str, search: str) -> str:
    """Where the SEARCH text most nearly occurs, shown with line numbers, so the agent can copy it exactly."""
    src_lines = source.splitlines()
    want = [w.strip() for w in search.splitlines()]
    if not src_lines:
        return "The file is empty."
    n = max(1, len(want))
    # seq2 is the fixed side: SequenceMatcher caches its index, so scanning windows stays cheap.
    matcher = difflib.SequenceMatcher(None, b="\n".join(want), autojunk=False)
    best_start, best_ratio = 0, -1.0
    for start in range(max(1, len(src_lines) - n + 1)):
        matcher.set_seq1("\n".join(s.strip() for s in src_lines[start:start + n]))
        if matcher.real_quick_ratio() > best_ratio and matcher.ratio() > best_ratio:
            best_start, best_ratio = start, matcher.ratio()
    shown = src_lines[best_start:best_start + n]
    note = ("they differ only in whitespace or indentation" if [s.strip() for s in shown] == want
            else "copy the lines exactly as they are in the file")
    lo, hi = max(0, best_start - 2), min(len(src_lines), best_start + n + 2)  # two lines of context each side
    listing = "\n".join(f"{k + 1:5d}| {src_lines[k]}" for k in range(lo, hi))
    return f"Closest lines in the file, lines {best_start + 1}-{best_start + n} ({note}):\n{listing}"


def _check_compiles(path: str, source: str) -> None:
    try:
        ast.parse(source, filename=path)
    except SyntaxError as e:
        line = (e.text or "").rstrip()
        raise EditError(f"{path}: the edited file does not compile: {e.msg} at line {e.lineno}: {line!r}") from e
