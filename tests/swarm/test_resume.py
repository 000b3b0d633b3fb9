"""kill -9 in the middle of an evaluation, then `resume`: nothing lost, nothing evaluated or proposed twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from loop_helpers import small_target

from knowledge_base import CandidateState, KnowledgeStore, RunState
from swarm.loop import _dirname
from swarm.paths import kb_path, swarm_home

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _calls() -> list[dict]:
    path = swarm_home() / "fake_calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _swarm(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    return subprocess.Popen([sys.executable, str(HERE / "swarm_fakes.py"), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _kill_at_evaluation(tmp_path: Path, args: list[str], starts: int, event: str = "start") -> None:
    """Start the fake swarm with `args` and kill -9 it once `starts` evaluations (or calibrations, with `event`
    "calibrate") have started."""
    proc = _swarm(tmp_path, *args)
    deadline = time.monotonic() + 60
    while sum(c["event"] == event for c in _calls()) < starts:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"the run never started {event} {starts}"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_resume_after_kill_9_mid_evaluation(tmp_path):
    target = small_target(budget={"iterations": 2})
    (tmp_path / "target.json").write_text(target.model_dump_json())
    (tmp_path / "plan.json").write_text(json.dumps({"1,0": 1.5, "2,1": 1.2}))
    args = [str(tmp_path / "target.json"), str(tmp_path / "plan.json"), "1.0"]
    # Kill once the first evaluation of iteration 2 has started (iteration 1 is fully done by then).
    _kill_at_evaluation(tmp_path, args, 3)
    kb = KnowledgeStore(kb_path(target))
    run_id = kb.runs()[0].id
    states = {c.id: c.state for c in kb.candidates(run_id)}
    assert list(states.values()).count(CandidateState.DONE) == 2 and len(states) == 4
    assert kb.run(run_id).state is RunState.RUNNING

    resumed = _swarm(tmp_path, *args, run_id)
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    assert f"{run_id} iteration budget spent" in output

    calls = _calls()
    proposals = Counter((c["iteration"], c["slot"]) for c in calls if c["event"] == "propose")
    assert proposals == {(1, 0): 1, (1, 1): 1, (2, 0): 1, (2, 1): 1}
    done = Counter(c["candidate"] for c in calls if c["event"] == "done")
    started = Counter(c["candidate"] for c in calls if c["event"] == "start")
    assert len(done) == 4 and set(done.values()) == {1}
    assert sorted(started.values()) == [1, 1, 1, 2]  # only the killed evaluation ran again
    kb = KnowledgeStore(kb_path(target))
    run = kb.run(run_id)
    assert run.state is RunState.FINISHED and run.elapsed_s > 0
    assert all(c.state is CandidateState.DONE for c in kb.candidates(run_id))
    assert [k.id for k in kb.kept_engines(run_id)] == [f"{run_id}.i001.s00", f"{run_id}.i002.s01"]
    log = swarm_home() / "runs" / run_id / "events.jsonl"
    events = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert events.count("run_started") == 2 and events.count("noise_calibrated") == 1


def test_resume_skipping_pending_goes_on_from_the_next_iteration(tmp_path):
    """Killed during iteration 1's first evaluation, resumed with skip_pending: both of iteration 1's candidates
    are recorded as skipped without an evaluation (a kept sibling may have made their parent old news on a GPU
    lease), iteration 2 is proposed and evaluated, and an engine identical to a skipped one is evaluated, not
    turned away as a duplicate."""
    target = small_target(budget={"iterations": 2})
    (tmp_path / "target.json").write_text(target.model_dump_json())
    # slot 0 proposes the same engine on the same parent in both iterations (nothing is kept in iteration 1)
    (tmp_path / "plan.json").write_text(json.dumps({"1,0": "broken_again", "2,0": "broken_again"}))
    args = [str(tmp_path / "target.json"), str(tmp_path / "plan.json"), "1.0"]
    _kill_at_evaluation(tmp_path, args, 1)
    run_id = KnowledgeStore(kb_path(target)).runs()[0].id

    resumed = _swarm(tmp_path, *args, run_id, "skip")
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    kb = KnowledgeStore(kb_path(target))
    verdicts = {v.candidate_id: v for v in kb.verdicts(run_id)}
    first = [f"{run_id}.i001.s00", f"{run_id}.i001.s01"]
    assert [verdicts[c].status for c in first] == ["skipped", "skipped"]
    assert "--skip-pending" in verdicts[first[0]].summary
    started = Counter(c["candidate"] for c in _calls() if c["event"] == "start")
    assert sorted(started) == [_dirname(c) for c in (first[0], f"{run_id}.i002.s00", f"{run_id}.i002.s01")]
    assert set(started.values()) == {1}  # iteration 1: only the start the kill cut short
    assert verdicts[f"{run_id}.i002.s00"].status == "mismatch"  # evaluated, though the same engine as i001.s00
    assert all(c.state is CandidateState.DONE for c in kb.candidates(run_id))


def test_a_would_be_win_killed_during_its_calibration_is_decided_on_resume_not_evaluated_again(tmp_path):
    """On a GPU lease, an evaluation (~330 s) and the run's first A/A calibration (~170 s) may not both fit: the
    verdict waiting for the calibration is held in the knowledge base, and the resumed run (even one skipping
    its pending candidates) measures the calibration and keeps the engine, without evaluating it again."""
    target = small_target(budget={"iterations": 1})
    (tmp_path / "target.json").write_text(target.model_dump_json())
    (tmp_path / "plan.json").write_text(json.dumps({"1,0": 1.5}))
    args = [str(tmp_path / "target.json"), str(tmp_path / "plan.json"), "1.0"]
    _kill_at_evaluation(tmp_path, args, 1, event="calibrate")
    kb = KnowledgeStore(kb_path(target))
    run_id = kb.runs()[0].id
    win = f"{run_id}.i001.s00"
    assert [h.candidate_id for h in kb.held_verdicts(run_id)] == [win]

    resumed = _swarm(tmp_path, *args, run_id, "skip")
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    kb = KnowledgeStore(kb_path(target))
    verdicts = {v.candidate_id: v for v in kb.verdicts(run_id)}
    assert verdicts[win].status == "pass" and verdicts[f"{run_id}.i001.s01"].status == "skipped"
    assert [k.id for k in kb.kept_engines(run_id)] == [win] and not kb.held_verdicts(run_id)
    calls = _calls()
    assert [c["candidate"] for c in calls if c["event"] == "start"].count(_dirname(win)) == 1
    assert sum(c["event"] == "calibrate" for c in calls) == 2  # the killed one, and the resumed run's


def test_a_run_stopped_by_its_budget_continues_once_the_target_raises_it(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"1,0": 1.5, "2,0": 1.2, "3,0": 1.1}))
    target_file = tmp_path / "target.json"
    target_file.write_text(small_target(budget={"iterations": 1}).model_dump_json())
    first, _ = _swarm(tmp_path, str(target_file), str(plan), "0").communicate(timeout=120)
    run_id = first.split()[0]
    again, _ = _swarm(tmp_path, str(target_file), str(plan), "0", run_id).communicate(timeout=120)
    assert "iteration budget spent (1/1)" in again  # same budget: nothing more to do
    target_file.write_text(small_target(budget={"iterations": 3}).model_dump_json())
    raised, _ = _swarm(tmp_path, str(target_file), str(plan), "0", run_id).communicate(timeout=120)
    assert f"{run_id} iteration budget spent (3/3)" in raised
    kb = KnowledgeStore(kb_path(small_target()))
    assert {c.iteration for c in kb.candidates(run_id)} == {1, 2, 3}
    assert kb.run(run_id).state is RunState.FINISHED
