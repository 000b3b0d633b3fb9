"""Reusing a kept engine as a second target's baseline: re-verified first; a failing one falls back."""
from __future__ import annotations

import json

import pytest
from loop_helpers import fake_swarm, small_target
from swarm_fakes import FakeAgent, FakeEvaluator

from knowledge_base import REFERENCE_ID
from swarm.baseline import BaselineError
from swarm.events import BaselineChecked
from swarm.run_state import RunView


def _keep_one_engine() -> str:
    with fake_swarm(small_target("first", budget={"iterations": 1}), [FakeAgent("a", {(1, 0): 1.5})]) as swarm:
        outcome = swarm.start()
        (kept,) = swarm.kb.kept_engines(outcome.run_id)
    return kept.id


def test_best_kept_engine_is_reverified_and_becomes_the_baseline(tmp_path):
    kept_id = _keep_one_engine()
    evaluator = FakeEvaluator(log=tmp_path / "evaluations.jsonl")
    events = []
    agent = FakeAgent("b", {(1, 0): 1.2})
    target = small_target("second", baseline="best", budget={"iterations": 1})
    with fake_swarm(target, [agent], evaluator, listeners=[events.append]) as swarm:
        outcome = swarm.start()
        view = RunView.load(swarm.kb, outcome.run_id)
    check = next(e for e in events if isinstance(e, BaselineChecked))
    assert check.ok and check.engine_id == kept_id
    starts = [r for r in map(json.loads, (tmp_path / "evaluations.jsonl").read_text().splitlines())
              if r["event"] == "start"]
    assert [r["correctness_only"] for r in starts] == [True] + [False] * (len(starts) - 1)  # not timed again
    assert view.run.baseline_request == "best" and view.baseline.id == kept_id
    assert agent.contexts[0].parent_id == kept_id and agent.contexts[0].applied_transforms == ["fake_i001.s00"]
    (kept,) = view.kept
    assert kept.parent_id == kept_id and kept.speedup_vs_reference == pytest.approx(1.8)
    assert view.speedup_vs_baseline(kept) == pytest.approx(1.2)


def test_kept_engine_failing_reverification_falls_back_to_the_reference():
    kept_id = _keep_one_engine()
    events = []
    target = small_target("third", baseline=kept_id, budget={"iterations": 1})
    evaluator = FakeEvaluator(mismatch_tags=("i001.s00",))  # the kept engine's marker: it now "mismatches"
    with fake_swarm(target, [FakeAgent("c", {})], evaluator, listeners=[events.append]) as swarm:
        outcome = swarm.start()
        view = RunView.load(swarm.kb, outcome.run_id)
        lessons = swarm.kb.lessons()
    check = next(e for e in events if isinstance(e, BaselineChecked))
    assert not check.ok and "failed re-verification" in check.summary and "falling back" in check.summary
    assert view.baseline.id == REFERENCE_ID and view.run.baseline_request == kept_id
    assert any(lesson.candidate_id == kept_id and "re-verification" in lesson.summary for lesson in lessons)


def test_kept_engine_out_of_memory_beside_the_reference_starts_no_run():
    """An engine that does not fit beside the reference is not wrong, the machine is too small (a full-size H200
    engine on an 80 GB H100): no run from the reference, an error naming the fix, the knowledge base as it was."""
    kept_id = _keep_one_engine()
    target = small_target("fifth", baseline=kept_id, budget={"iterations": 1})
    evaluator = FakeEvaluator(oom_tags=("i001.s00",))
    with fake_swarm(target, [FakeAgent("e", {})], evaluator) as swarm:
        runs, lessons = swarm.kb.runs(), swarm.kb.lessons()
        with pytest.raises(BaselineError, match=f"kept engine {kept_id} .* does not fit in memory on cpu beside the "
                                                "reference .*CUDA out of memory.*a device with more memory"):
            swarm.start()
        assert swarm.kb.runs() == runs and swarm.kb.lessons() == lessons
        assert [k.id for k in swarm.kb.kept_engines()] == [kept_id]


def test_unknown_kept_engine_baseline_names_the_fix():
    target = small_target("fourth", baseline="no-such-engine")
    with fake_swarm(target, [FakeAgent("d", {})]) as swarm, pytest.raises(BaselineError, match="swarm kb list"):
        swarm.start()
