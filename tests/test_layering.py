"""Imports point one way: swarm -> evaluator -> reference_runtime <- candidate engines; nothing imports swarm."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {  # package -> top-level packages it must never import
    "reference_runtime": {"swarm", "evaluator", "knowledge_base", "candidates", "targets"},
    "evaluator": {"swarm", "knowledge_base", "candidates"},
    "knowledge_base": {"swarm", "evaluator"},
    "candidates": {"swarm", "evaluator"},
    "targets": {"swarm", "evaluator", "knowledge_base", "candidates", "reference_runtime"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    bad = [f"{path.relative_to(ROOT)} imports {name}"
           for path in sorted((ROOT / package).rglob("*.py"))
           for name in _imports(path) & FORBIDDEN[package]]
    assert not bad, "\n".join(bad)
