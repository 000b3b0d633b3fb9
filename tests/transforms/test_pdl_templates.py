"""Programmatic dependent launch is safe only if every kernel launched with it waits for its predecessor before
touching memory (templates/pdl/pdl.py): in every template file, each kernel's first statement is pdl_enter(GDC),
and each launch of it passes pdl_args. Off wherever it cannot run."""
from __future__ import annotations

import ast
import importlib.util

import pytest
import torch

from knowledge_base.transforms.base import TEMPLATES


def _kernels(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.decorator_list and node.name.endswith("_kernel")}


def _launches(tree: ast.Module) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("_kernel")]


def _first_statement(kernel: ast.FunctionDef) -> ast.stmt:
    body = kernel.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    return body[1] if docstring else body[0]


@pytest.mark.parametrize("path", sorted(p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.glob("*/*.py")
                                        if _kernels(ast.parse(p.read_text()))))
def test_every_template_kernel_waits_first_and_every_launch_passes_the_flag(path):
    tree = ast.parse((TEMPLATES / path).read_text())
    for name, kernel in _kernels(tree).items():
        assert ast.unparse(_first_statement(kernel)) == "pdl_enter(GDC)", f"{path}: {name} does not wait first"
        assert kernel.args.args[-1].arg == "GDC", f"{path}: {name} lacks the GDC flag"
    launches = _launches(tree)
    assert launches
    for call in launches:
        spread = [ast.unparse(k.value) for k in call.keywords if k.arg is None]
        assert len(spread) == 1 and spread[0].startswith("pdl_args("), f"{path}: {ast.unparse(call)[:80]}"


def test_off_on_the_cpu_and_under_the_interpreter(monkeypatch):
    spec = importlib.util.spec_from_file_location("pdl_template", TEMPLATES / "pdl" / "pdl.py")
    pdl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pdl)
    assert pdl.pdl_args(torch.device("cpu")) == {"GDC": False, "launch_pdl": False}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert pdl.pdl_args(torch.device("cuda", 0)) == {"GDC": False, "launch_pdl": False}
