"""Ray executor (`executor: ray` in the target): each evaluation is a Ray task holding the GPUs it needs.

Tasks carry the engine sources, not paths, so workers on other hosts need only this repository installed;
`ray_address: null` starts a local cluster.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from candidates import engine_files, write_files
from targets import Target

from .executor import CalibrateFn, EvalJob, EvalResult, EvaluateFn

_REPO_ROOT = Path(__file__).resolve().parents[1]


def _evaluate_task(evaluate: EvaluateFn, target: Target, candidate: dict[str, str], baseline: dict[str, str],
                   secret_seed: int, calibration: Any, correctness_only: bool) -> tuple[Any, float]:
    with tempfile.TemporaryDirectory(prefix="swarm-ray-") as tmp:
        write_files(candidate, Path(tmp, "candidate"))
        write_files(baseline, Path(tmp, "baseline"))
        start = time.monotonic()
        verdict = evaluate(Path(tmp, "candidate"), target, baseline_dir=Path(tmp, "baseline"),
                           work_dir=Path(tmp, "work"), secret_seed=secret_seed, calibration=calibration,
                           correctness_only=correctness_only)
        return verdict, time.monotonic() - start


def task_target(target: Target) -> Target:
    """The target as a Ray task sees it: Ray narrows CUDA_VISIBLE_DEVICES to the task's GPUs, so generation is
    the task's first GPU and the codec its second, whatever indices the target names on its own machine."""
    hw = target.hardware
    if hw.device == "cpu":
        return target
    two = hw.codec_gpu is not None
    task_hw = hw.model_copy(update={"gpu_count": 2 if two else 1, "generation_gpu": 0, "codec_gpu": 1 if two else None})
    return target.model_copy(update={"hardware": task_hw})


def _calibrate_task(calibrate: CalibrateFn, target: Target, baseline: dict[str, str], secret_seed: int) -> Any:
    with tempfile.TemporaryDirectory(prefix="swarm-ray-") as tmp:
        write_files(baseline, Path(tmp, "baseline"))
        return calibrate(Path(tmp, "baseline"), target, work_dir=Path(tmp, "work"), secret_seed=secret_seed)


class RayExecutor:
    def __init__(self, target: Target, evaluate: EvaluateFn, calibrate: CalibrateFn):
        import ray

        self._ray = ray
        self.target = target
        self._evaluate = evaluate
        self._calibrate = calibrate
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            env = None
            if target.ray_address is None:  # local workers import swarm from this checkout
                path = os.pathsep.join(p for p in (str(_REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
                env = {"env_vars": {"PYTHONPATH": path}}
            ray.init(address=target.ray_address, runtime_env=env, include_dashboard=False, logging_level="WARNING")
        self._task_target = task_target(target)
        gpus = self._task_target.hardware.gpu_count if target.hardware.device == "cuda" else 0
        self._eval_remote = ray.remote(num_gpus=gpus, max_retries=0)(_evaluate_task)
        self._calibrate_remote = ray.remote(num_gpus=gpus, max_retries=0)(_calibrate_task)

    def _slots(self) -> int:
        """Evaluations in flight at once: as many as the cluster's GPUs hold; one on CPU, where a timed run
        shares the host with nothing else (as the local executor's CPU slot)."""
        gpus = self._task_target.hardware.gpu_count if self.target.hardware.device == "cuda" else 0
        if not gpus:
            return 1
        return max(1, int(self._ray.cluster_resources().get("GPU", 0)) // gpus)

    def _submit(self, job: EvalJob, started: Callable[[EvalJob], None]) -> Any:
        started(job)
        return self._eval_remote.remote(self._evaluate, self._task_target, engine_files(job.candidate_dir),
                                        engine_files(job.baseline_dir), job.secret_seed, job.calibration,
                                        job.correctness_only)

    def evaluate_all(self, jobs: Sequence[EvalJob], proceed: Callable[[], bool] = lambda: True,
                     started: Callable[[EvalJob], None] = lambda job: None) -> Iterator[EvalResult]:
        """Tasks are submitted as slots free up, and a freed slot's next task only once the caller has taken the
        finished one's result: a calibration the caller submits then (the A/A band a would-be win asks for) is
        scheduled before the jobs still queued, as in the local executor."""
        queued, refs = deque(jobs), {}
        for _ in range(min(self._slots(), len(queued))):
            job = queued.popleft()
            refs[self._submit(job, started)] = job
        try:
            while refs:
                done, _ = self._ray.wait(list(refs), num_returns=1)
                job = refs.pop(done[0])
                verdict, seconds = self._ray.get(done[0])
                yield EvalResult(job=job, verdict=verdict, seconds=seconds)
                if not proceed():
                    break  # tasks still running are cancelled, queued ones never submitted: the budget ran out
                if queued:
                    job = queued.popleft()
                    refs[self._submit(job, started)] = job
        finally:
            for ref in refs:
                self._ray.cancel(ref, force=True)

    def calibrate(self, baseline_dir: Path, work_dir: Path, secret_seed: int) -> Any:
        return self._ray.get(self._calibrate_remote.remote(self._calibrate, self._task_target,
                                                           engine_files(baseline_dir), secret_seed))

    def close(self) -> None:
        if self._owns_ray:  # a cluster the caller connected to stays connected
            self._ray.shutdown()
