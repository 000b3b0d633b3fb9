"""`swarm nightly`: each target resumes from its best kept engine under the GPU-hour budget; a dated report."""
from __future__ import annotations

import yaml
from loop_helpers import fake_swarm, small_target
from swarm_fakes import FakeAgent

from swarm.nightly import run_nightly
from swarm.paths import nightly_dir


def _write(path, target):
    path.write_text(yaml.safe_dump(target.model_dump(mode="json")))
    return path


def test_nightly_continues_from_the_best_kept_engine_and_reports(tmp_path):
    good = _write(tmp_path / "good.yaml", small_target("nightly-cpu", budget={"iterations": 1}))
    idle = _write(tmp_path / "idle.yaml", small_target("idle-cpu", budget={"iterations": 1}))
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nbudget: {iterations: 0}\n")
    plans = {"nightly-cpu": {(1, 0): 1.5}, "idle-cpu": {}}
    swarms = []

    def open_swarm(target):
        swarms.append(target)
        return fake_swarm(target, [FakeAgent("n", plans[target.name])])

    first = run_nightly([good, broken, idle], 0.5, open_swarm, day="2030-01-01")
    assert not first.ok and [bool(e.error) for e in first.entries] == [False, True, False]
    ran, _, nothing = first.entries
    assert (ran.kept, ran.baseline_id, nothing.kept, nothing.stop_reason.startswith("iteration budget")) == \
        (1, "reference", 0, True)
    assert all(t.baseline == "best" and t.budget.gpu_hours == 0.5 for t in swarms)
    report = (nightly_dir() / "2030-01-01" / "report.md").read_text()
    assert "| nightly-cpu | nightly-cpu-001 | reference | 1 | 1.500x |" in report
    assert "broken.yaml: harness error" in report and "iterations" in report
    assert (nightly_dir() / "2030-01-01" / "nightly-cpu-001.html").exists()

    second = run_nightly([good], 0.5, open_swarm, day="2030-01-02")
    (entry,) = second.entries
    assert second.ok and entry.baseline_id == "nightly-cpu-001.i001.s00"  # re-verified, then built upon
    assert entry.kept == 1 and entry.best_speedup == 1.5
