"""The `swarm` CLI end to end (typer CliRunner) over runs made with the fakes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from loop_helpers import fake_swarm, small_target
from rich.console import Console
from swarm_fakes import FakeAgent
from typer.testing import CliRunner

from knowledge_base import KnowledgeStore
from swarm.cli import app
from swarm.paths import kb_path
from swarm.review import render_summary
from targets import load_target, with_agents, with_budget

runner = CliRunner(env={"COLUMNS": "250"})
ROOT = Path(__file__).resolve().parents[2]


def _run_with_a_kept_engine() -> str:
    with fake_swarm(small_target(budget={"iterations": 2}), [FakeAgent("a", {(1, 0): 1.5, (2, 1): "broken"})]) as s:
        return s.start().run_id


@pytest.mark.parametrize("command", [["run"], ["eval"], ["tolerances"], ["review"], ["nightly"], ["kb", "list"],
                                     ["kb", "show"], ["kb", "export"]])
def test_every_command_prints_its_help(command):
    # help texts are plain text: "provider[/model]" once crashed `swarm run --help` as unbalanced rich markup
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and "Traceback" not in result.output


def test_skip_pending_without_resume_is_a_usage_error():
    result = runner.invoke(app, ["run", str(ROOT / "targets" / "drama3_cpu.yaml"), "--skip-pending"])
    assert result.exit_code == 2 and "--skip-pending" in result.output and "--resume" in result.output


def test_malformed_target_yaml_is_a_located_error_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel:\n  config: drama3-tiny\nhardware:\n  device: tpu\nbenchmark:\n  prompts: []\n"
                   "budgte: {}\n")
    result = runner.invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:5: hardware.device" in result.output and f"{bad}:8: budgte" in result.output
    assert "unknown key" in result.output and "Traceback" not in result.output
    unparsable = tmp_path / "broken.yaml"
    unparsable.write_text("name: [unclosed\n")
    result = runner.invoke(app, ["run", str(unparsable)])
    assert result.exit_code == 2 and "not valid YAML" in result.output


def test_review_shows_the_winning_diff_and_writes_an_html_report(tmp_path):
    run_id = _run_with_a_kept_engine()
    html = tmp_path / "review.html"
    result = runner.invoke(app, ["review", run_id, "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert f"{run_id}.i001.s00" in result.output and "1.500x" in result.output
    narrow = runner.invoke(app, ["review", run_id], env={"COLUMNS": "100"})
    assert f"│ {run_id}.i001.s00 │" in narrow.output  # the table's ids stay whole in a narrow terminal
    assert "+SPEED = 1.5" in result.output and "fake_speed.py" in result.output
    page = html.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") == 2 and "best frames/s" in page
    assert '<span class="add">+SPEED = 1.5' in page and "<script" not in page


def test_kb_list_show_and_export(tmp_path):
    run_id = _run_with_a_kept_engine()
    listed = runner.invoke(app, ["kb", "list"])
    assert listed.exit_code == 0 and run_id in listed.output and f"{run_id}.i001.s00" in listed.output
    shown = runner.invoke(app, ["kb", "show", run_id])
    assert shown.exit_code == 0 and "mismatch" in shown.output and "pass" in shown.output
    candidate = runner.invoke(app, ["kb", "show", f"{run_id}.i002.s01"])
    assert candidate.exit_code == 0 and "teacher_forced" in candidate.output
    assert runner.invoke(app, ["kb", "show", "nope"]).exit_code == 2
    exported = json.loads(runner.invoke(app, ["kb", "export", "--json"]).output)
    assert len(exported["candidates"]) == 4 and exported["kept_engines"][0]["id"] == f"{run_id}.i001.s00"
    lines = runner.invoke(app, ["kb", "export"]).output.splitlines()
    tables = {json.loads(line)["table"] for line in lines}
    assert tables == {"runs", "candidates", "verdicts", "kept_engines", "lessons"}


def test_review_of_an_unknown_run_exits_2():
    result = runner.invoke(app, ["review", "no-such-run"])
    assert result.exit_code == 2 and "no run 'no-such-run'" in result.output


def test_nightly_rejects_a_non_positive_budget(tmp_path):
    result = runner.invoke(app, ["nightly", str(tmp_path / "t.yaml"), "--budget-gpu-hours", "0"])
    assert result.exit_code == 2 and "must be > 0" in result.output


def test_budget_options_override_the_target_file(tmp_path):
    target = load_target(ROOT / "targets" / "drama3_h200_quick.yaml")
    raised = with_budget(target, wall_minutes=30, iterations=None)
    assert raised.budget.wall_minutes == 30 and raised.budget.iterations == target.budget.iterations
    assert raised.budget.gpu_hours == target.budget.gpu_hours and with_budget(target) is target
    result = runner.invoke(app, ["run", str(ROOT / "targets" / "drama3_cpu.yaml"), "--wall-minutes", "-1"])
    assert result.exit_code == 2 and "--wall-minutes: Input should be greater than 0" in result.output, result.output
    assert "Traceback" not in result.output


def test_every_shipped_target_loads_and_the_h200_ones_share_their_gates():
    targets = {p.stem: load_target(p) for p in sorted((ROOT / "targets").glob("*.yaml"))}
    assert {"drama3_cpu", "drama3_h200", "drama3_h200_quick", "drama3_h200_lease"} <= set(targets)
    quick, lease = targets["drama3_h200_quick"], targets["drama3_h200_lease"]
    assert (lease.tolerances, lease.acceptance) == (quick.tolerances, quick.acceptance)
    assert (lease.baseline, quick.baseline) == ("best", "reference")
    # the GPU targets stream as the seed's SGLang-Omni setup; the CPU demo's streams equal the whole decode
    assert {t.benchmark.stream_overlap_frames for n, t in targets.items() if t.hardware.device == "cuda"} == {32}
    assert targets["drama3_cpu"].benchmark.stream_overlap_frames is None


def test_agents_option_replaces_the_target_files_agents():
    target = load_target(ROOT / "targets" / "drama3_h200.yaml")  # written for API agents
    offline = with_agents(target, "offline:2")
    assert [(a.provider, a.count) for a in offline.agents] == [("offline", 2)] and with_agents(target, None) is target
    mixed = with_agents(target, "offline, openai/gpt-5:3")
    assert [(a.provider, a.model, a.count) for a in mixed.agents] == [("offline", "offline", 1), ("openai", "gpt-5", 3)]
    result = runner.invoke(app, ["run", str(ROOT / "targets" / "drama3_cpu.yaml"), "--agents", "gemini:2"])
    assert result.exit_code == 2 and "--agents 'gemini:2': provider" in result.output, result.output
    assert "provider[/model][:count]" in result.output and "Traceback" not in result.output


def test_a_budget_stop_names_the_option_that_raises_it():
    run_id = _run_with_a_kept_engine()
    text = _summary(run_id, width=250)
    assert "iteration budget spent (2/2)" in text and f"swarm run TARGET --resume {run_id} --iterations N" in text
    assert f"│ {run_id}.i001.s00 │" in _summary(run_id, width=80)  # the id the commands take, whole


def _summary(run_id: str, width: int) -> str:
    screen = Console(width=width, record=True)
    store = KnowledgeStore(kb_path())
    try:
        render_summary(store, run_id, screen)
    finally:
        store.close()
    return screen.export_text()


def test_eval_refuses_a_calibration_that_is_not_one(tmp_path):
    kept = tmp_path / "aa.json"
    kept.write_text('{"speedup": 1.0}')
    result = runner.invoke(app, ["eval", str(ROOT / "reference_runtime" / "model"), "--target",
                                 str(ROOT / "targets" / "drama3_cpu.yaml"), "--calibration", str(kept)])
    assert result.exit_code == 2 and "is not a kept A/A calibration" in result.output and "delete it" in result.output


def test_eval_says_where_the_evaluation_time_went(tmp_path):
    target = small_target(benchmark={"prompts": small_target().benchmark.prompts[:1], "frames": 3, "warm_trials": 3},
                          tolerances={"prompts": 1, "frames": 3})
    path = tmp_path / "small.yaml"
    path.write_text(json.dumps(target.model_dump(mode="json")))  # JSON is YAML
    result = runner.invoke(app, ["eval", str(ROOT / "reference_runtime" / "model"), "--target", str(path)])
    assert result.exit_code == 1, result.output  # the reference is not faster than itself
    line = next(x for x in result.output.splitlines() if "seconds by stage" in x)
    assert "build" in line and "correctness" in line and "benchmark" in line, line
    assert "engines busy: candidate" in line and "oracle" in line, line
