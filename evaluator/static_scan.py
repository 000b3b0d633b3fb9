"""AST backstop over a candidate's Python files; runtime checks are the real defence (eval_integrity.md §0.6).

Flagged as evidence: gc object walks and stack inspection (E8), threads/processes/fork (E4), ctypes (E6),
absolute or parent-relative file paths (reading outside the package), sys.modules edits. Deciding on their
own (cheat_suspected): patching a timer or sync (time.*, torch.cuda.*: E6) by assignment, setattr or a mock
target string, and importing the harness (`evaluator`, E22).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .verdict import Evidence

TIMER_PREFIXES = ("time.", "torch.cuda.")
TIMER_MODULES = ("time", "torch.cuda")
TIMER_STRINGS = ("perf_counter", "elapsed_time", "synchronize", "monotonic", "time.time")
HARNESS_MODULES = ("evaluator",)
FLAGGED_IMPORTS = {"threading": "threads (E4)", "_thread": "threads (E4)", "multiprocessing": "processes (E4)",
                   "concurrent": "threads/processes (E4)", "subprocess": "processes", "ctypes": "ctypes (E6)",
                   "cffi": "native calls (E6)", "inspect": "stack inspection (E8)", "gc": "gc access (E8)"}
FLAGGED_CALLS = {"gc.get_objects": "walks the heap (E8)", "gc.get_referrers": "walks the heap (E8)",
                 "sys._getframe": "stack inspection (E8)", "os.fork": "forks", "os.forkpty": "forks",
                 "os.system": "runs a shell", "os.popen": "runs a shell"}


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    message: str
    tampering: bool

    def evidence(self) -> Evidence:
        return Evidence(check="static", message=f"{self.path}:{self.line}: {self.message}")


def scan(package_dir: Path) -> list[Finding]:
    findings = []
    for path in sorted(Path(package_dir).rglob("*.py")):
        rel = str(path.relative_to(package_dir))
        try:
            tree = ast.parse(path.read_text(errors="replace"), filename=rel)
        except SyntaxError as e:
            findings.append(Finding(rel, e.lineno or 0, f"does not parse: {e.msg}", tampering=False))
            continue
        findings += _Scanner(rel).visit_tree(tree)
    return findings


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str):
        self.path, self.aliases, self.found = path, {}, []

    def visit_tree(self, tree: ast.AST) -> list[Finding]:
        self.visit(tree)
        return self.found

    def flag(self, node: ast.AST, message: str, tampering: bool = False) -> None:
        self.found.append(Finding(self.path, getattr(node, "lineno", 0), message, tampering))

    def dotted(self, node: ast.AST) -> str:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(self.aliases.get(node.id, node.id))
            return ".".join(reversed(parts))
        return ""

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._module(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._module(node, node.module)
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def _module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if top in HARNESS_MODULES:
            self.flag(node, f"imports the harness module {name}", tampering=True)
        elif top in FLAGGED_IMPORTS:
            self.flag(node, f"imports {name}: {FLAGGED_IMPORTS[top]}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assigned(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node.target)
        self.generic_visit(node)

    def _assigned(self, target: ast.AST) -> None:
        name = self.dotted(target) if isinstance(target, ast.Attribute) else ""
        if name.startswith(TIMER_PREFIXES):
            self.flag(target, f"assigns {name}: patches a timer or sync (E6)", tampering=True)
        elif isinstance(target, ast.Subscript) and self.dotted(target.value) == "sys.modules":
            self.flag(target, "edits sys.modules")

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name in FLAGGED_CALLS:
            self.flag(node, f"calls {name}: {FLAGGED_CALLS[name]}")
        if name in ("setattr", "builtins.setattr") and node.args:
            obj = self.dotted(node.args[0])
            if obj in TIMER_MODULES or obj.startswith(TIMER_PREFIXES):
                self.flag(node, f"setattr on {obj}: patches a timer or sync (E6)", tampering=True)
        if name in ("open", "io.open", "pathlib.Path", "Path", "os.listdir", "os.scandir") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and \
                    (arg.value.startswith("/") or ".." in arg.value):
                self.flag(node, f"{name}({arg.value!r}) reaches outside the package")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str) and value.startswith(TIMER_PREFIXES) and \
                any(s in value for s in TIMER_STRINGS):
            self.flag(node, f"names the timer {value!r} (a mock/patch target?) (E6)", tampering=True)
