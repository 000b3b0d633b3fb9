"""Hand-written fakes for driving the loop fast: agents that set a fake speed in the engine package, and an
evaluator that reads it back. Also a `__main__` that runs a Swarm with them (the kill -9 test's subprocess).

The fake engine speed lives in `fake_speed.py` (absent = 1.0); the fake evaluator's figures are
frames/s = 100 * speed, TTFA = 20 / speed ms, and the comparison is the candidate/baseline speed ratio.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

from evaluator import NoiseCalibration, benchmark_protocol, judge_version
from evaluator.statistics import decide, threshold
from evaluator.verdict import BenchResult, Comparison, Evidence, Profile, ProfileRow, PromptFigures, Status, Verdict
from swarm.agents.base import AgentError, AgentExhausted, BudgetExceeded
from swarm.agents.ledger import CallRecord, CostLedger
from swarm.proposal import FileEdit, Proposal, ProposalContext

SPEED_FILE = "fake_speed.py"


def read_speed(files: dict[str, str]) -> tuple[float, str]:
    source = files.get(SPEED_FILE, "SPEED = 1.0\nNOTE = ''\n")
    speed = float(re.search(r"SPEED = ([0-9.]+)", source).group(1))
    note = re.search(r"NOTE = '(.*)'", source).group(1)
    return speed, note


def speed_file(speed: float, note: str) -> str:
    return f"SPEED = {speed!r}\nNOTE = {note!r}\n"


class FakeAgent:
    """Plays a plan: (iteration, slot) -> a speed factor, or "bad_edit" / "broken" / "error" / "exhausted" /
    "budget", or "dup" (exactly the engine that a factor of 1.5 in slot 0 of the same iteration makes), or
    "broken_again" (the same broken engine whenever the parent is the same)."""

    def __init__(self, name: str, plan: dict[tuple[int, int], float | str], cost_usd: float = 0.0,
                 log: Path | None = None):
        self.name = name
        self.plan = plan
        self.cost_usd = cost_usd  # charged to the run's ledger per proposal, like an LLM call
        self.log = log
        self.ledger: CostLedger | None = None
        self.contexts: list[ProposalContext] = []

    def bind(self, ledger: CostLedger) -> FakeAgent:
        self.ledger = ledger
        return self

    def propose(self, context: ProposalContext) -> Proposal:
        self.contexts.append(context)
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps({"event": "propose", "iteration": context.iteration, "slot": context.slot}) + "\n")
        if self.cost_usd and self.ledger is not None:
            with self.ledger.hold(self.name, self.cost_usd) as hold:
                hold.charge(CallRecord(self.name, "fake", 100, 100, self.cost_usd))
        action = self.plan.get((context.iteration, context.slot), 1.0)
        if action == "error":
            raise AgentError(f"{self.name}: the model returned no edits")
        if action == "exhausted":
            raise AgentExhausted(f"{self.name}: nothing left to try on {context.parent_id}")
        if action == "budget":
            raise BudgetExceeded(f"{self.name}: the call would cross the dollar cap")
        speed, _ = read_speed(context.parent_files)
        tag = f"i{context.iteration:03d}.s{0 if action == 'dup' else context.slot:02d}"
        new_speed = speed * (1.5 if action == "dup" else action if isinstance(action, float) else 1.0)
        if action == "broken_again":
            tag = "again"
        new_note = f"{tag} broken" if action in ("broken", "broken_again") else tag
        current = context.parent_files.get(SPEED_FILE, "")
        search = "SPEED = 0.0 (no such line)\n" if action == "bad_edit" else current
        return Proposal(agent=self.name, title=f"{tag} x{action}", rationale=f"plan says {action}",
                        edits=[FileEdit(path=SPEED_FILE, search=search, replace=speed_file(new_speed, new_note))],
                        transforms=[f"fake_{tag}"], cost_usd=self.cost_usd)


class FakeEvaluator:
    """`evaluator.evaluate`'s signature. MISMATCH when the engine's note says "broken" or names a tag in
    `mismatch_tags`, OOM when it names one in `oom_tags`; else CORRECT if asked for correctness only, PASS when the
    speed ratio clears the target's min_speedup, SLOWER otherwise."""

    def __init__(self, delay_s: float = 0.0, mismatch_tags: tuple[str, ...] = (), log: Path | None = None,
                 oom_tags: tuple[str, ...] = ()):
        self.delay_s = delay_s
        self.mismatch_tags = mismatch_tags
        self.oom_tags = oom_tags
        self.log = log

    def _log(self, **record) -> None:
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def __call__(self, candidate_dir: Path, target, *, baseline_dir: Path, work_dir: Path, secret_seed=None,
                 calibration=None, gpu_index=None, correctness_only=False) -> Verdict:
        self._log(event="start", candidate=candidate_dir.name, seed=secret_seed, correctness_only=correctness_only)
        time.sleep(self.delay_s)
        work_dir.mkdir(parents=True, exist_ok=True)
        speed, note = read_speed(_files(candidate_dir))
        base, _ = read_speed(_files(baseline_dir))
        verdict = _verdict(candidate_dir, baseline_dir, speed, base, note, target, self.mismatch_tags, self.oom_tags,
                           calibration)
        if correctness_only and verdict.status.is_correct:
            verdict = Verdict(status=Status.CORRECT, summary="correct (not timed)", candidate=verdict.candidate,
                              baseline=verdict.baseline, stage_seconds=verdict.stage_seconds)
        self._log(event="done", candidate=candidate_dir.name, status=verdict.status.value)
        return verdict


def fake_calibrate(baseline_dir: Path, target, *, work_dir: Path, gpu_index=None, secret_seed=None) -> NoiseCalibration:
    return NoiseCalibration(speedup=1.0, ci_low=0.99, ci_high=1.01, rel_iqr=0.01, pairs=4, baseline=str(baseline_dir),
                            ttfa_ci_low=0.99, ttfa_ci_high=1.01, protocol=benchmark_protocol(target))


def logged_calibrate(evaluator: FakeEvaluator):
    """fake_calibrate that logs a "calibrate" event to the evaluator's log and takes as long as one of its
    evaluations, as on a GPU."""
    def calibrate(*args, **kwargs) -> NoiseCalibration:
        evaluator._log(event="calibrate")
        time.sleep(evaluator.delay_s)
        return fake_calibrate(*args, **kwargs)

    return calibrate


def _files(d: Path) -> dict[str, str]:
    p = d / SPEED_FILE
    return {SPEED_FILE: p.read_text()} if p.exists() else {}


def _bench(engine: str, speed: float) -> BenchResult:
    fps, ttfa, rtf = 100 * speed, 20 / speed, 0.2 / speed
    return BenchResult(engine=engine, prompts=[PromptFigures(
        prompt="hello", trials=4, ttfa_ms_p50=ttfa, ttfa_ms_p95=ttfa, frames_per_s_p50=fps, frames_per_s_p95=fps,
        rtf_p50=rtf, rtf_p95=rtf)])


def _profile(speed: float) -> Profile:
    """One row, named after the engine's speed so that tests can tell whose profile an agent was shown."""
    return Profile(source="cpu", frames=8, rows=[ProfileRow(name=f"fake::speed_{speed:g}_op", ms_per_frame=10 / speed,
                                                            calls_per_frame=3.0)],
                   total_ms_per_frame=12 / speed, total_calls_per_frame=5.0)


def _verdict(candidate_dir, baseline_dir, speed, base, note, target, mismatch_tags, oom_tags, calibration) -> Verdict:
    common = dict(candidate=str(candidate_dir), baseline=str(baseline_dir), stage_seconds={"fake": 0.0},
                  judge=judge_version(target))
    if any(tag in note for tag in oom_tags):
        return Verdict(status=Status.OOM, summary="CUDA out of memory", **common)
    if "broken" in note or any(tag in note for tag in mismatch_tags):
        return Verdict(status=Status.MISMATCH, summary=f"teacher-forced logits differ ({note})",
                       evidence=[Evidence(check="teacher_forced", message="max |diff| 0.5 at frame 3", frame=3,
                                          value=0.5, limit=1e-3)], **common)
    ratio = speed / base
    # decided as the real evaluator decides: no win without the run's A/A band (the loop measures it then)
    comparison = Comparison(speedup=ratio, ci_low=ratio * 0.99, ci_high=ratio * 1.01, ttfa_ratio=base / speed,
                            threshold=threshold(target.benchmark.min_speedup, calibration),
                            calibrated=calibration is not None)
    status, _ = decide(comparison, target.benchmark.max_plausible_speedup)
    return Verdict(status=status, summary=f"{ratio:.3f}x frames/s", candidate_bench=_bench("candidate", speed),
                   baseline_bench=_bench("baseline", base), candidate_profile=_profile(speed),
                   baseline_profile=_profile(base),
                   comparison=comparison,
                   evidence=[Evidence(check="timing", message=f"speed {speed} vs {base}")], **common)


def main(argv: list[str]) -> None:
    """python swarm_fakes.py TARGET_JSON PLAN_JSON DELAY_S [RUN_ID [skip]]: a Swarm with fakes (for kill -9 tests);
    with RUN_ID it resumes that run, with skip skipping its pending candidates."""
    from candidates import EngineRepo
    from knowledge_base import KnowledgeStore
    from swarm.executor import LocalExecutor
    from swarm.loop import Swarm
    from swarm.paths import engines_path, kb_path, swarm_home
    from targets import Target

    target = Target.model_validate_json(Path(argv[0]).read_text())
    plan = {tuple(map(int, k.split(","))): v for k, v in json.loads(Path(argv[1]).read_text()).items()}
    log = swarm_home() / "fake_calls.jsonl"
    evaluate = FakeEvaluator(delay_s=float(argv[2]), log=log)
    swarm = Swarm(target, kb=KnowledgeStore(kb_path(target)), repo=EngineRepo(engines_path()),
                  executor=LocalExecutor(target, evaluate, logged_calibrate(evaluate)),
                  make_agents=lambda ledger: [FakeAgent("fake-0", plan, log=log).bind(ledger)])
    with swarm:
        outcome = swarm.resume(argv[3], skip_pending=argv[4:] == ["skip"]) if len(argv) > 3 else swarm.start()
    print(outcome.run_id, outcome.stop_reason, flush=True)


if __name__ == "__main__":  # run with PYTHONPATH=<repo root>
    main(sys.argv[1:])
