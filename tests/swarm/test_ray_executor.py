"""The Ray executor on a local CPU cluster: one evaluation as a Ray task, engine sources shipped by value."""
from __future__ import annotations

import pytest
import swarm_fakes
from loop_helpers import small_target
from swarm_fakes import SPEED_FILE, FakeEvaluator, fake_calibrate, logged_calibrate, speed_file

from candidates import write_files
from swarm.executor import EvalJob

ray = pytest.importorskip("ray")


def test_ray_task_evaluates_a_candidate_and_calibrates(tmp_path):
    from ray import cloudpickle

    from swarm.ray_executor import RayExecutor

    cloudpickle.register_pickle_by_value(swarm_fakes)  # Ray workers do not have tests/ on their path
    target = small_target(executor="ray")
    write_files({SPEED_FILE: speed_file(1.5, "c"), "__init__.py": ""}, tmp_path / "candidate")
    write_files({"__init__.py": ""}, tmp_path / "baseline")
    job = EvalJob(candidate_id="c", candidate_dir=tmp_path / "candidate", baseline_dir=tmp_path / "baseline",
                  work_dir=tmp_path / "work", secret_seed=1,
                  calibration=fake_calibrate(tmp_path / "baseline", target, work_dir=tmp_path))  # a win needs one
    executor = RayExecutor(target, evaluate=FakeEvaluator(), calibrate=fake_calibrate)
    try:
        (result,) = list(executor.evaluate_all([job]))
        calibration = executor.calibrate(tmp_path / "baseline", tmp_path / "cal", secret_seed=2)
    finally:
        executor.close()
        cloudpickle.unregister_pickle_by_value(swarm_fakes)
    assert result.job is job and result.verdict.status.value == "pass"
    assert result.verdict.comparison.speedup == pytest.approx(1.5)
    assert "swarm-ray-" in result.verdict.candidate  # evaluated from the worker's own copy
    assert calibration.pairs == 4
    assert not ray.is_initialized()


def test_a_calibration_asked_for_between_results_runs_before_the_queued_evaluations(tmp_path):
    """As in the local executor (test_loop's slot-order test): the next queued job is submitted only after the
    caller has taken a result, so the A/A band a would-be win asks for is not scheduled behind its siblings."""
    import json

    from ray import cloudpickle

    from swarm.ray_executor import RayExecutor

    cloudpickle.register_pickle_by_value(swarm_fakes)
    target = small_target(executor="ray")
    write_files({"__init__.py": ""}, tmp_path / "baseline")
    jobs = []
    for name in ("c1", "c2"):
        write_files({SPEED_FILE: speed_file(1.5, name), "__init__.py": ""}, tmp_path / name)
        jobs.append(EvalJob(candidate_id=name, candidate_dir=tmp_path / name, baseline_dir=tmp_path / "baseline",
                            work_dir=tmp_path / "work" / name, secret_seed=1, calibration=None))
    evaluator = FakeEvaluator(delay_s=0.5, log=tmp_path / "order.jsonl")
    executor = RayExecutor(target, evaluate=evaluator, calibrate=logged_calibrate(evaluator))
    try:
        for result in executor.evaluate_all(jobs):
            if result.job.candidate_id == "c1":
                executor.calibrate(tmp_path / "baseline", tmp_path / "cal", secret_seed=2)
    finally:
        executor.close()
        cloudpickle.unregister_pickle_by_value(swarm_fakes)
    order = [json.loads(line)["event"] for line in (tmp_path / "order.jsonl").read_text().splitlines()]
    assert order == ["start", "done", "calibrate", "start", "done"]
