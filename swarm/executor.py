"""Executors run the evaluator on candidates: locally in threads (each evaluate() runs its own killable
subprocesses) with at most one evaluation per device slot, or on a Ray cluster (`swarm.ray_executor`).

The evaluator functions are injected so tests can drive the loop with a small fake; `make_executor(target)`
wires the real `evaluator.evaluate` / `evaluator.calibrate_noise`.
"""
from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from evaluator.verdict import Verdict
from targets import Target

from .paths import compile_cache_path

EvaluateFn = Callable[..., Verdict]  # evaluator.evaluate(candidate_dir, target, *, baseline_dir, work_dir, ...)
CalibrateFn = Callable[..., Any]  # evaluator.calibrate_noise(baseline_dir, target, *, work_dir, gpu_index, secret_seed)


@dataclass(frozen=True, slots=True)
class EvalJob:
    candidate_id: str
    candidate_dir: Path
    baseline_dir: Path
    work_dir: Path
    secret_seed: int
    calibration: Any = None  # the run's evaluator.NoiseCalibration
    correctness_only: bool = False  # no benchmark: a kept engine's re-verification


@dataclass(frozen=True, slots=True)
class EvalResult:
    job: EvalJob
    verdict: Verdict
    seconds: float  # wall seconds the evaluation held its device slot


class Executor(Protocol):
    def evaluate_all(self, jobs: Sequence[EvalJob], proceed: Callable[[], bool] = lambda: True,
                     started: Callable[[EvalJob], None] = lambda job: None) -> Iterator[EvalResult]:
        """Evaluate the jobs, yielding results in completion order; a job not yet started when `proceed()`
        turns false is dropped (the budget ran out). `started(job)` is called as a job begins (from a worker
        thread)."""

    def calibrate(self, baseline_dir: Path, work_dir: Path, secret_seed: int) -> Any:
        """A/A noise calibration of the baseline on one device slot."""

    def close(self) -> None: ...


def device_slots(target: Target) -> list[int | None]:
    """GPU indices that may each host one evaluation at a time; [None] on CPU (one timed run at a time)."""
    hw = target.hardware
    if hw.device == "cpu":
        return [None]
    if hw.codec_gpu is not None:  # one evaluation spans the generation GPU and the codec GPU
        return [hw.generation_gpu]
    return list(range(hw.gpu_count))


class LocalExecutor:
    def __init__(self, target: Target, evaluate: EvaluateFn, calibrate: CalibrateFn):
        self.target = target
        self._evaluate = evaluate
        self._calibrate = calibrate
        slots = device_slots(target)
        self._free: queue.Queue[int | None] = queue.Queue()
        for slot in slots:
            self._free.put(slot)
        self._pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="swarm-eval")

    def _run(self, job: EvalJob, gpu: int | None, started: Callable[[EvalJob], None]) -> EvalResult:
        start = time.monotonic()
        try:
            started(job)
            verdict = self._evaluate(job.candidate_dir, self.target, baseline_dir=job.baseline_dir,
                                     work_dir=job.work_dir, secret_seed=job.secret_seed, calibration=job.calibration,
                                     gpu_index=gpu, correctness_only=job.correctness_only)
        finally:
            self._free.put(gpu)
        return EvalResult(job=job, verdict=verdict, seconds=time.monotonic() - start)

    def _launch(self, queued: deque[EvalJob], proceed: Callable[[], bool],
                started: Callable[[EvalJob], None]) -> set[Future[EvalResult]]:
        """Start queued jobs on the slots free now; none once `proceed()` is false (the rest are dropped)."""
        launched = set()
        while queued:
            try:
                gpu = self._free.get_nowait()
            except queue.Empty:
                break
            if not proceed():
                self._free.put(gpu)
                queued.clear()
                break
            launched.add(self._pool.submit(self._run, queued.popleft(), gpu, started))
        return launched

    def evaluate_all(self, jobs: Sequence[EvalJob], proceed: Callable[[], bool] = lambda: True,
                     started: Callable[[EvalJob], None] = lambda job: None) -> Iterator[EvalResult]:
        """A slot that a finished job frees goes to the next queued job only once the caller has taken that
        job's result: what the caller does with it on a slot (the A/A calibration that a would-be win asks for)
        comes before the jobs still queued. On one GPU, a win's decision waited for a sibling's whole
        evaluation otherwise (session 19: a lease ended in that wait)."""
        queued = deque(jobs)
        running = self._launch(queued, proceed, started)
        try:
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
                running |= self._launch(queued, proceed, started)
        finally:
            for future in running:
                future.cancel()

    def calibrate(self, baseline_dir: Path, work_dir: Path, secret_seed: int) -> Any:
        gpu = self._free.get()
        try:
            return self._calibrate(baseline_dir, self.target, work_dir=work_dir, gpu_index=gpu,
                                   secret_seed=secret_seed)
        finally:
            self._free.put(gpu)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_executor(target: Target) -> Executor:
    """The executor the target asks for, running the real evaluator; locally, evaluations against one baseline
    share its compile caches through $SWARM_HOME/compile_cache (evaluator/compile_cache.py). Ray nodes compile
    afresh: their tmp dirs are the nodes'."""
    from evaluator import calibrate_noise, evaluate

    if target.executor == "ray":
        from .ray_executor import RayExecutor

        return RayExecutor(target, evaluate=evaluate, calibrate=calibrate_noise)
    cache = compile_cache_path()
    return LocalExecutor(target, evaluate=partial(evaluate, compile_cache=cache),
                         calibrate=partial(calibrate_noise, compile_cache=cache))
