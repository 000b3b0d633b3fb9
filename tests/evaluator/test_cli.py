"""`python -m evaluator`: prints the verdict, writes its JSON, exits non-zero for an incorrect candidate."""
from __future__ import annotations

import json

from evaluator.__main__ import main
from evaluator.sandbox import REPO_ROOT
from tests.evaluator.candidate_factory import build_engine_body, make_candidate


def test_cli_writes_the_verdict(tmp_path, capsys):
    candidate = make_candidate(tmp_path, files=build_engine_body('raise ValueError("cli probe")'))
    out = tmp_path / "verdict.json"
    code = main([str(candidate), "--target", str(REPO_ROOT / "targets" / "drama3_cpu.yaml"), "--json", str(out),
                 "--work-dir", str(tmp_path / "work")])
    assert code == 1
    assert capsys.readouterr().out.startswith("build_error: ValueError: cli probe")
    assert json.loads(out.read_text())["status"] == "build_error"


def test_cli_rejects_a_bad_target(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbenchmark: {}\n")
    assert main([str(tmp_path), "--target", str(bad)]) == 2
    assert "invalid target" in capsys.readouterr().err
