"""evaluate(): static scan -> confined builds -> correctness cascade -> interleaved benchmark -> audit -> Verdict;
calibrate_noise(): the baseline against itself (A/A) under the same benchmark protocol.

Whatever the candidate does, the caller gets a Verdict, never an exception. Failures of the oracle or of a trusted
baseline raise EvaluatorError instead: they are the harness's problem, not the candidate's.
"""
from __future__ import annotations

import math
import random
import secrets
import shutil
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reference_runtime.config import get_config
from targets.schema import Target

from . import static_scan
from .benchmark import AUDITED_TRIALS, Benchmark, Trial, audit, bench_result, first_audio_gain, paired
from .compile_cache import CompileCache
from .devices import gpu_mismatch
from .correctness import AudioLevel, Cascade
from .inputs import held_out_requests, trial_request
from .profiling import PROFILE_FRAMES, PROFILE_S, profile_engine
from .sandbox import REFERENCE_DIR, Deadline, Pool, Ready, Worker, WorkerFailure
from .statistics import MorePairs, NoiseCalibration, calibrated, compare, decide
from .verdict import Comparison, EvaluatorError, Evidence, Rejected, Status, Verdict
from .version import benchmark_protocol, judge_version


def evaluate(candidate_dir: Path, target: Target, *, baseline_dir: Path, work_dir: Path,
             secret_seed: int | None = None, calibration: NoiseCalibration | None = None,
             gpu_index: int | None = None, correctness_only: bool = False,
             compile_cache: Path | None = None) -> Verdict:
    """The cascade on `candidate_dir`: static scan, build, correctness against the reference, then the benchmark
    against `baseline_dir`; with `correctness_only`, no benchmark (Status.CORRECT when it passes): re-verifying an
    engine that was timed already then costs no timing of a slow baseline. With `compile_cache` (a folder kept
    between evaluations), the engines start from the baseline's compile caches (compile_cache.py)."""
    return _Evaluation(Path(candidate_dir), target, Path(baseline_dir), Path(work_dir), secret_seed, calibration,
                       gpu_index, correctness_only, compile_cache).run()


def calibrate_noise(baseline_dir: Path, target: Target, *, work_dir: Path, gpu_index: int | None = None,
                    secret_seed: int | None = None, compile_cache: Path | None = None) -> NoiseCalibration:
    rng = random.Random(secrets.randbits(63) if secret_seed is None else secret_seed)
    pool = Pool(target, _fresh_dir(Path(work_dir), "calibrate"), gpu_index, _seed(compile_cache, Path(baseline_dir)))
    a = None
    try:
        deadline = Deadline.after(target.timeouts.build_s, "build")
        a, b = pool.start("baseline_a", Path(baseline_dir)), pool.start("baseline_b", Path(baseline_dir))
        for worker in (a, b):  # both build at once: builds are not timed
            _same_gpu(target, _trusted(worker.ready, deadline))
        deadline = Deadline.after(target.timeouts.benchmark_s, "benchmark")
        level = _trusted(_level, pool, a, target, rng, deadline)
        trials = _trusted(Benchmark(pool, a, b, target, rng, level).run, deadline)
    finally:
        pool.close(trusted=a)
    c = compare(paired(trials), paired(trials, first_audio_gain), 1.0, target.benchmark.confidence,
                rng.getrandbits(32), min_speedup=target.benchmark.min_speedup, calibration=None)
    return NoiseCalibration(speedup=c.speedup, ci_low=c.ci_low, ci_high=c.ci_high, rel_iqr=c.spread, pairs=c.pairs,
                            baseline=str(baseline_dir), ttfa_ci_low=c.first_audio.ci_low,
                            ttfa_ci_high=c.first_audio.ci_high, protocol=benchmark_protocol(target))


def with_calibration(verdict: Verdict, calibration: NoiseCalibration, target: Target) -> Verdict:
    """`verdict` decided again against an A/A band measured after it; a verdict with no speed comparison, or one
    already calibrated, as it is."""
    if verdict.comparison is None or verdict.comparison.calibrated:
        return verdict
    c = calibrated(verdict.comparison, target.benchmark.min_speedup, calibration)
    status, summary = decide(c, target.benchmark.max_plausible_speedup)
    return verdict.model_copy(update={"status": status, "summary": summary, "comparison": c})


class _Evaluation:
    def __init__(self, candidate_dir: Path, target: Target, baseline_dir: Path, work_dir: Path,
                 secret_seed: int | None, calibration: NoiseCalibration | None, gpu_index: int | None,
                 correctness_only: bool, compile_cache: Path | None):
        self.candidate_dir, self.target, self.baseline_dir = candidate_dir, target, baseline_dir
        self.correctness_only = correctness_only
        self.rng = random.Random(secrets.randbits(63) if secret_seed is None else secret_seed)
        self.calibration = calibration
        self.pool = Pool(target, _fresh_dir(work_dir, "eval"), gpu_index, _seed(compile_cache, baseline_dir))
        self.evidence: list[Evidence] = []
        self.stages: dict[str, float] = {}
        self.ready: Ready | None = None
        self.verdict_fields: dict = {}
        self._baseline_worker: Worker | None = None

    def run(self) -> Verdict:
        status, summary = Status.CRASH, ""
        try:
            status, summary = self._cascade()
        except WorkerFailure as f:
            if f.role != "candidate":
                raise EvaluatorError(f"the {f.role} engine failed ({f.status.value}): {f.message}{_limit_fix(f)}\n"
                                     f"{f.log_tail}") from f
            status, summary = f.status, f.message
        except Rejected as r:
            status, summary = r.status, r.evidence[0].message if r.evidence else r.status.value
            self.evidence = r.evidence + self.evidence
        finally:
            candidate = next((w for w in self.pool.workers if w.role == "candidate"), None)
            log_tail = candidate.log_tail() if candidate else ""
            self.evidence += [Evidence(check="sandbox", message=n) for n in (candidate.notes if candidate else [])]
            if candidate is not None and candidate.seeded:
                self.evidence.append(Evidence(check="sandbox", message=(
                    "the engines started from the compile caches an earlier evaluation's baseline left")))
            engine_seconds = {w.role: round(w.busy_s, 3) for w in self.pool.workers}
            self.pool.close(trusted=self._baseline_worker)
        return Verdict(status=status, candidate=str(self.candidate_dir), baseline=str(self.baseline_dir),
                       summary=summary, evidence=self.evidence, stage_seconds=self.stages,
                       engine_seconds=engine_seconds, log_tail=log_tail,
                       hardware=self.ready.hardware if self.ready else "",
                       software=self.ready.software if self.ready else "", judge=judge_version(self.target),
                       **self.verdict_fields)

    @contextmanager
    def stage(self, name: str, limit_s: float) -> Iterator[Deadline]:
        started = time.perf_counter()
        try:
            yield Deadline.after(limit_s, name)
        finally:
            self.stages[name] = round(time.perf_counter() - started, 3)

    def _cascade(self) -> tuple[Status, str]:
        t = self.target
        with self.stage("static", math.inf):
            findings = static_scan.scan(self.candidate_dir) if self.candidate_dir.is_dir() else []
            self.evidence += [f.evidence() for f in findings]
            tampering = [f for f in findings if f.tampering]
            if tampering:
                return Status.CHEAT_SUSPECTED, f"static scan: {tampering[0].path}:{tampering[0].line}: " \
                                               f"{tampering[0].message}"
        kept_baseline = self.baseline_dir.resolve() != REFERENCE_DIR
        with self.stage("build", t.timeouts.build_s) as deadline:
            candidate = self._start("candidate", self.candidate_dir)
            oracle = self.pool.start("oracle", None)
            # A kept engine's build (compiles, graph captures: 84 s on the H200) runs beside the candidate's rather
            # than after the correctness cascade; builds are not timed, so neither is frozen for the other.
            baseline = self.pool.start("baseline", self.baseline_dir) if kept_baseline and not self.correctness_only \
                else None
            try:
                self.ready = candidate.ready(deadline)
            except WorkerFailure as failure:
                if failure.status is Status.CRASH:
                    _reference_starts(self.pool, oracle, deadline)
                raise
            if baseline is not None:
                _trusted(baseline.ready, deadline)
                self._baseline_worker = baseline
            oracle_ready = _trusted(self.pool.use(oracle).ready, deadline)
            _same_gpu(self.target, oracle_ready)
        if self.ready.fingerprint != oracle_ready.fingerprint:
            raise Rejected(Status.MISMATCH, [Evidence(check="weights", message=(
                f"weights fingerprint {self.ready.fingerprint} differs from the oracle's {oracle_ready.fingerprint}"))])
        with self.stage("correctness", t.timeouts.correctness_s) as deadline:
            report = Cascade(self.pool, oracle, candidate, t, self.rng,
                             self._baseline if kept_baseline else None).run(deadline)
        self.verdict_fields["free_running_agreement_frames"] = report.free_running
        self.evidence += report.inherited
        self.evidence.append(report.summary(t.tolerances.logit_atol))
        if self.correctness_only:
            return Status.CORRECT, f"correct (not timed): {self.evidence[-1].message}"
        baseline = self._baseline() if kept_baseline else oracle
        with self.stage("benchmark", t.timeouts.benchmark_s) as deadline:
            bench = Benchmark(self.pool, baseline, candidate, t, self.rng, report.level)
            more_pairs = MorePairs()
            trials = bench.run(deadline, undecided=lambda trials: more_pairs(*self._looked_at(trials)))
            self.evidence += bench.evidence
        # a stage of its own within the benchmark's limit: the eager oracle replays whole timed streams
        with self.stage("audit", max(deadline.at - time.perf_counter(), 0.0)) as deadline:
            timed = [x for x in trials if x.timed and x.engine == "candidate"]
            for trial in self.rng.sample(timed, min(AUDITED_TRIALS, len(timed))):
                audit(self.pool, oracle, trial, t, deadline)
        status, summary = self._decide(trials)
        if status.is_correct:
            with self.stage("profile", max(min(deadline.at - time.perf_counter(), PROFILE_S), 0.0)) as remaining:
                self._profile({"candidate": candidate, "baseline": baseline}, bench, remaining)
        return status, summary

    def _profile(self, workers: dict[str, Worker], bench: Benchmark, deadline: Deadline) -> None:
        """Both engines profile one short request, after the decision and within the benchmark's time: for the
        agents only (see profiling.py)."""
        spec = self.target.benchmark
        request = trial_request(bench.config, spec.prompts[0], self.rng, min(spec.frames, PROFILE_FRAMES))
        for role, worker in workers.items():
            result = profile_engine(self.pool, worker, request, bench.schedule, deadline)
            if isinstance(result, Evidence):
                self.evidence.append(result)
            else:
                self.verdict_fields[f"{role}_profile"] = result

    def _baseline(self) -> Worker:
        """The baseline engine's worker: built beside the candidate when the benchmark will need it, else started
        on first use, by the correctness cascade to tell whether a mismatch is inherited."""
        if self._baseline_worker is None:
            with self.stage("baseline_build", self.target.timeouts.build_s) as deadline:
                worker = self.pool.start("baseline", self.baseline_dir)
                _trusted(self.pool.use(worker).ready, deadline)
            self._baseline_worker = worker
        return self._baseline_worker

    def _start(self, role: str, package_dir: Path) -> Worker:
        try:
            return self.pool.start(role, package_dir)
        except (OSError, shutil.Error) as e:
            raise WorkerFailure(role, Status.BUILD_ERROR, f"cannot use {package_dir} as an engine package: {e}") from e

    def _decide(self, trials: list[Trial]) -> tuple[Status, str]:
        status, summary, fields = self._verdict_on(trials)
        self.verdict_fields |= fields
        return status, summary

    def _looked_at(self, trials: list[Trial]) -> tuple[Comparison, Status]:
        status, _, fields = self._verdict_on(trials)
        return fields["comparison"], status

    def _verdict_on(self, trials: list[Trial]) -> tuple[Status, str, dict]:
        """The speed verdict on `trials` and the verdict fields it rests on."""
        timed = [x for x in trials if x.timed]
        results = {name: bench_result(name, [x for x in timed if x.engine == name]) for name in ("candidate",
                                                                                                   "baseline")}
        ttfa = statistics.median(c.ttfa_ms_p50 / b.ttfa_ms_p50 for c, b in
                                 zip(results["candidate"].prompts, results["baseline"].prompts))
        comparison = compare(paired(trials), paired(trials, first_audio_gain), ttfa, self.target.benchmark.confidence,
                             self.rng.getrandbits(32), min_speedup=self.target.benchmark.min_speedup,
                             calibration=self.calibration)
        status, summary = decide(comparison, self.target.benchmark.max_plausible_speedup)
        return status, summary, {"candidate_bench": results["candidate"], "baseline_bench": results["baseline"],
                                 "comparison": comparison}


def _same_gpu(target: Target, ready: Ready) -> None:
    """A trusted engine's device is the target's GPU kind, or the evaluation stops before anything is timed."""
    if (why := gpu_mismatch(target.hardware, ready.hardware)) is not None:
        raise EvaluatorError(why)


def _reference_starts(pool: Pool, oracle: Worker, deadline: Deadline) -> None:
    """After a candidate crashed while starting: the reference's engine starts on this machine, or the machine is at
    fault (no CUDA device, a driver or package missing), not the candidate, and every candidate would be recorded as
    a crash and a lesson: a harness error instead."""
    try:
        pool.use(oracle).ready(deadline)
    except WorkerFailure as f:
        if f.status is Status.CRASH:
            raise EvaluatorError(f"the reference engine cannot start on this machine either ({f.message}): check "
                                 f"that it has the target's hardware ({_hardware(pool.target)})\n{f.log_tail}") from f


def _hardware(target: Target) -> str:
    h = target.hardware
    return "CPU" if h.device == "cpu" else f"{h.gpu_count} x {h.gpu or 'CUDA GPU'}"


def _trusted(call, *args):
    """Run a call on a trusted engine (oracle, baseline); its failures are the harness's, not the candidate's."""
    try:
        return call(*args)
    except WorkerFailure as e:
        raise EvaluatorError(f"a trusted engine failed: {e}{_limit_fix(e)}\n{e.log_tail}") from e
    except Rejected as e:
        raise EvaluatorError(f"a trusted engine failed: {e}") from e


# the target's limit each stage runs under (audit and profile take what the benchmark's limit leaves)
_STAGE_LIMITS = {"build": "build_s", "baseline_build": "build_s", "correctness": "correctness_s",
                 "benchmark": "benchmark_s", "audit": "benchmark_s", "profile": "benchmark_s"}


def _limit_fix(failure: WorkerFailure) -> str:
    """A trusted engine that ran out of time is not at fault (the eager reference at full size is slow): the
    target's limit for that stage is too short."""
    key = _STAGE_LIMITS.get(failure.stage) if failure.status is Status.TIMEOUT else None
    return f"; a trusted engine needs longer here: raise timeouts.{key} in the target" if key else ""


def _level(pool: Pool, worker: Worker, target: Target, rng: random.Random, deadline: Deadline) -> AudioLevel:
    config = get_config(target.model.config)
    request = held_out_requests(config, rng, 1, target.benchmark.frames)[0]
    audio = pool.use(worker).call("generate", deadline, "generation", request=request)["audio"]
    return AudioLevel.of(audio, config.codec.frame_samples)


def _seed(compile_cache: Path | None, baseline_dir: Path) -> tuple[CompileCache, Path] | None:
    if compile_cache is None:
        return None
    cache = CompileCache(compile_cache)
    return cache, cache.seed(baseline_dir)


def _fresh_dir(work_dir: Path, kind: str) -> Path:
    path = work_dir / f"{kind}-{secrets.token_hex(4)}"
    path.mkdir(parents=True)
    return path
