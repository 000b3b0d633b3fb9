"""The orchestrator loop with fake agents and a fake evaluator: retention, lineage, feedback, stop rules."""
from __future__ import annotations

import json

import pytest
from loop_helpers import fake_swarm, small_target
from swarm_fakes import SPEED_FILE, FakeAgent, FakeEvaluator, fake_calibrate, logged_calibrate

from knowledge_base import REFERENCE_ID, CandidateState
from swarm.events import EngineKept, EvaluationFinished, NoiseCalibrated, read_events
from swarm.loop import ACCEPTED
from swarm.paths import run_dir
from swarm.run_state import RunView


def test_pass_is_kept_and_becomes_the_next_parent():
    agent = FakeAgent("a", {(1, 0): 1.5, (1, 1): "broken", (2, 0): 1.2, (2, 1): "bad_edit"})
    with fake_swarm(small_target(), [agent]) as swarm:
        outcome = swarm.start()
        view = RunView.load(swarm.kb, outcome.run_id)
        lessons = swarm.kb.lessons()
        repo = swarm.repo
    assert outcome.run_id == "fake-cpu-001" and outcome.stop_reason.startswith("iteration budget")
    assert [c.id for c in view.candidates] == [f"fake-cpu-001.i00{i}.s0{s}" for i in (1, 2) for s in (0, 1)]
    statuses = {cid: v.status for cid, v in view.verdicts.items()}
    assert list(statuses.values()) == ["pass", "mismatch", "pass", "edit_error"]
    first, second = view.kept
    assert first.parent_id == REFERENCE_ID and second.parent_id == first.id
    assert second.speedup_vs_reference == pytest.approx(1.8)
    assert view.speedup_vs_baseline(view.best()) == pytest.approx(1.8)
    # lineage in git: the second kept engine is a child of the first, which is a child of the reference
    assert repo.info(second.git_commit).parents == (first.git_commit,)
    assert repo.info(first.git_commit).parents == (view.baseline.commit,)
    assert "SPEED = 1.8" in repo.files(second.git_commit)[SPEED_FILE].replace("1.7999999999999998", "1.8")
    edit_error = view.candidates[3]
    assert edit_error.git_commit == "" and edit_error.state is CandidateState.DONE
    # the mismatch of iteration 1 is in iteration 2's context, and iteration 2 forks from the kept engine
    context = next(c for c in agent.contexts if c.iteration == 2)
    assert context.parent_id == first.id and any("mismatch" in f for f in context.failures)
    assert context.applied_transforms == ["fake_i001.s00"]
    assert {(lesson.outcome, lesson.candidate_id) for lesson in lessons} == {
        ("worked", first.id), ("failed", view.candidates[1].id), ("worked", second.id), ("failed", edit_error.id)}
    assert "does not match" in next(lesson.evidence for lesson in lessons if lesson.candidate_id == edit_error.id)



def test_the_a_a_band_is_measured_once_at_the_first_would_be_win():
    calls = []

    def calibrate(*args, **kwargs):
        calls.append(args[0])
        return fake_calibrate(*args, **kwargs)

    slower = FakeAgent("a", {(1, 0): 0.9, (1, 1): "broken", (2, 0): 1.0, (2, 1): 0.8})
    with fake_swarm(small_target(), [slower], calibrate=calibrate) as swarm:
        outcome = swarm.start()
        assert swarm.kb.run(outcome.run_id).calibration_json == ""
    assert calls == []  # a run with no candidate that could win never pays for the A/A benchmark

    faster = FakeAgent("b", {(1, 0): 0.9, (1, 1): 1.5, (2, 0): 1.2, (2, 1): 0.8})
    with fake_swarm(small_target(name="fake-cpu-b"), [faster], calibrate=calibrate) as swarm:
        outcome = swarm.start()
        view = RunView.load(swarm.kb, outcome.run_id)
    assert len(calls) == 1 and [v.status for v in view.verdicts.values()] == ["slower", "pass", "pass", "slower"]
    events = [type(e) for e in read_events(run_dir(outcome.run_id) / "events.jsonl")]
    # measured when the first win came back, before that candidate's verdict was recorded
    assert events.index(NoiseCalibrated) < events.index(EvaluationFinished, events.index(EvaluationFinished) + 1)
    assert events.index(NoiseCalibrated) > events.index(EvaluationFinished)


def test_the_a_a_band_takes_the_device_slot_before_a_queued_sibling(tmp_path):
    log = tmp_path / "slot.jsonl"
    evaluator = FakeEvaluator(delay_s=0.2, log=log)
    # one device slot (a CPU target), two would-be wins: whichever is evaluated first asks for the A/A band
    agent = FakeAgent("a", {(1, 0): 1.5, (1, 1): 1.4})
    with fake_swarm(small_target(budget={"iterations": 1}), [agent], evaluator,
                    calibrate=logged_calibrate(evaluator)) as swarm:
        swarm.start()
    order = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert order == ["start", "done", "calibrate", "start", "done"]


def test_edit_errors_are_fed_back_to_the_next_iteration():
    agent = FakeAgent("a", {(1, 0): "bad_edit"})
    with fake_swarm(small_target(), [agent]) as swarm:
        swarm.start()
    context = next(c for c in agent.contexts if c.iteration == 2)
    assert any("edits did not apply" in lesson.summary for lesson in context.lessons)
    assert any("(edit_error): edit block 1 (fake_speed.py): no such file" in f for f in context.failures)


def test_run_stops_when_acceptance_criteria_hold():
    target = small_target(acceptance={"speedup": 1.4}, budget={"iterations": 5})
    events = []
    with fake_swarm(target, [FakeAgent("a", {(1, 1): 1.5})], listeners=[events.append]) as swarm:
        outcome = swarm.start()
        iterations = {c.iteration for c in swarm.kb.candidates(outcome.run_id)}
    assert outcome.accepted and outcome.stop_reason == ACCEPTED and iterations == {1}
    kept = [e for e in events if isinstance(e, EngineKept)]
    assert len(kept) == 1 and kept[0].speedup_vs_baseline == pytest.approx(1.5)
    logged = read_events(run_dir(outcome.run_id) / "events.jsonl")
    assert [e.kind for e in logged][0] == "run_started" and logged[-1].kind == "run_stopped"
    assert sum(isinstance(e, EvaluationFinished) for e in logged) == 2


@pytest.mark.parametrize("budget, reason", [
    ({"iterations": 1}, "iteration budget"),
    ({"wall_minutes": 0.02}, "wall-clock budget"),  # 1.2 s: one iteration of two 0.8 s evaluations
    ({"dollars": 1.0}, "dollar budget"),
    ({"gpu_hours": 1e-6}, "GPU-hour budget"),
])
def test_budget_caps_stop_the_run(budget, reason):
    target = small_target(budget={"iterations": 4, **budget})
    agent = FakeAgent("a", {}, cost_usd=0.3)
    delay_s = 0.8 if "wall_minutes" in budget else 0.01
    with fake_swarm(target, [agent], FakeEvaluator(delay_s=delay_s)) as swarm:
        outcome = swarm.start()
        run = swarm.kb.run(outcome.run_id)
        iterations = {c.iteration for c in swarm.kb.candidates(outcome.run_id)}
    assert outcome.stop_reason.startswith(reason) and not outcome.accepted
    assert iterations == ({1, 2} if reason == "dollar budget" else {1})
    assert run.spent_usd <= 1.0 + 1e-9 if "dollars" in budget else run.spent_usd > 0


def test_dollar_cap_refusal_mid_iteration_stops_after_evaluating_what_exists():
    agent = FakeAgent("a", {(1, 1): "budget", (1, 0): 1.5})
    with fake_swarm(small_target(budget={"iterations": 3}), [agent]) as swarm:
        outcome = swarm.start()
        candidates = swarm.kb.candidates(outcome.run_id)
    assert outcome.stop_reason.startswith("dollar budget")
    assert [c.slot for c in candidates] == [0] and candidates[0].state is CandidateState.DONE


def test_agent_failure_is_recorded_without_a_lesson():
    with fake_swarm(small_target(budget={"iterations": 1}), [FakeAgent("a", {(1, 0): "error"})]) as swarm:
        outcome = swarm.start()
        verdict = swarm.kb.verdict(f"{outcome.run_id}.i001.s00")
        lessons = swarm.kb.lessons()
    assert verdict.status == "agent_error" and "no edits" in verdict.summary
    assert all(lesson.candidate_id != f"{outcome.run_id}.i001.s00" for lesson in lessons)


def test_a_run_stops_when_every_slot_has_nothing_left_but_not_on_passing_errors():
    plan = {(1, 0): "error", (1, 1): "error",  # e.g. an API outage: the next iteration asks again
            (2, 1): "exhausted", (3, 0): "exhausted", (3, 1): "exhausted"}
    with fake_swarm(small_target(budget={"iterations": 6}), [FakeAgent("a", plan)]) as swarm:
        outcome = swarm.start()
        iterations = {c.iteration for c in swarm.kb.candidates(outcome.run_id)}
    assert iterations == {1, 2, 3}
    assert outcome.stop_reason.startswith("no agent has a candidate left") and "nothing left" in outcome.stop_reason


def test_second_run_gets_the_next_id_and_a_fresh_secret():
    with fake_swarm(small_target(budget={"iterations": 1}), [FakeAgent("a", {(1, 0): 1.5})]) as swarm:
        first = swarm.start()
        second = swarm.start()
        runs = [swarm.kb.run(first.run_id), swarm.kb.run(second.run_id)]
    assert (first.run_id, second.run_id) == ("fake-cpu-001", "fake-cpu-002")
    assert runs[0].secret != runs[1].secret
    assert json.loads(runs[0].calibration_json)["pairs"] == 4


def test_an_engine_proposed_twice_is_evaluated_once():
    evaluator = FakeEvaluator()
    with fake_swarm(small_target(budget={"iterations": 1}), [FakeAgent("a", {(1, 0): 1.5, (1, 1): "dup"})],
                    evaluator) as swarm:
        outcome = swarm.start()
        verdicts = swarm.kb.verdicts(outcome.run_id)
    # proposals are committed as they arrive, so either slot may be the first of the two
    first, second = sorted(verdicts, key=lambda v: v.status != "pass")
    assert (first.status, second.status) == ("pass", "duplicate")
    assert f"same engine as {first.candidate_id}" in second.summary


@pytest.mark.parametrize("change", ["evaluator", "gates"])
def test_an_engine_another_judge_rejected_is_evaluated_again_when_proposed_again(monkeypatch, change):
    """Another judge: a fixed evaluator, or the same evaluator under the target's corrected gates."""
    plan = {(1, 0): "broken_again", (1, 1): "broken_again", (2, 0): "broken_again"}
    with fake_swarm(small_target(budget={"iterations": 1}), [FakeAgent("a", plan)]) as swarm:
        run_id = swarm.start().run_id
        # same judge: once (proposals are committed as they arrive, so either slot may be the first)
        assert sorted(v.status for v in swarm.kb.verdicts(run_id)) == ["duplicate", "mismatch"]
    resumed = small_target(budget={"iterations": 2})
    if change == "evaluator":
        monkeypatch.setattr("swarm.loop.judge_version", lambda target: "a-fixed-evaluator")
    else:
        resumed = small_target(budget={"iterations": 2}, tolerances={"logit_atol": 0.5})
    with fake_swarm(resumed, [FakeAgent("a", plan)]) as swarm:
        swarm.resume(run_id)
        statuses = [v.status for v in swarm.kb.verdicts(run_id)]
        assert sorted(statuses[:2]) == ["duplicate", "mismatch"] and statuses[2:] == ["mismatch", "slower"]


def test_wall_budget_spent_mid_iteration_cancels_queued_evaluations():
    target = small_target(budget={"iterations": 3, "wall_minutes": 0.01})  # 0.6 s; each evaluation takes 0.8 s
    with fake_swarm(target, [FakeAgent("a", {}), FakeAgent("b", {})], FakeEvaluator(delay_s=0.8)) as swarm:
        outcome = swarm.start()
        candidates = swarm.kb.candidates(outcome.run_id)
        verdicts = swarm.kb.verdicts(outcome.run_id)
    assert outcome.stop_reason.startswith("wall-clock budget")
    assert len(candidates) == 4 and len(verdicts) == 1  # the other three were never started
    assert [c.state.value for c in candidates[1:]] == ["evaluating"] * 3


def test_a_band_measured_under_other_benchmark_settings_is_measured_again():
    """A target edited between a stop and its resume (here: the streams re-decode 2 frames of left context) gets a
    new A/A band at its next would-be win: the stored one timed other trials."""
    measured = []

    def calibrate(*args, **kwargs):
        measured.append(1)
        return fake_calibrate(*args, **kwargs)

    plan = {(1, 0): 1.5, (2, 0): 1.5, (3, 0): 1.5}
    with fake_swarm(small_target(budget={"iterations": 1}), [FakeAgent("a", plan)], calibrate=calibrate) as swarm:
        run_id = swarm.start().run_id
    edited = small_target(budget={"iterations": 3}, benchmark={"stream_overlap_frames": 2})
    for target, bands in ((small_target(budget={"iterations": 2}), 1), (edited, 2)):
        with fake_swarm(target, [FakeAgent("a", plan)], calibrate=calibrate) as swarm:
            swarm.resume(run_id)
            kept = len(swarm.kb.kept_engines(run_id))
        assert len(measured) == bands and kept == target.budget.iterations  # each iteration kept its win
