"""The orchestrator: variation (agents propose edits) -> evaluation (executor runs the evaluator) -> selective
retention (a PASS becomes a kept engine and the next parent), until the acceptance criteria hold or the budget
is spent. All state lives in the knowledge base, so `resume(run_id)` after a kill continues without redoing a
finished evaluation or asking for a proposal twice.
"""
from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from candidates import EngineRepo
from evaluator import NoiseCalibration, Status, Verdict, benchmark_protocol, judge_version, with_calibration
from knowledge_base import CandidateRecord, CandidateState, KnowledgeStore, RunRecord, RunState
from targets import Target

from . import events as ev
from .agents.base import Agent, AgentError, AgentExhausted
from .agents.ledger import CostLedger
from .baseline import resolve_baseline
from .budget import DOLLARS, exhausted
from .context import build_context
from .engine_key import engine_key
from .executor import EvalJob, Executor
from .outcome import (
    AGENT_ERROR,
    DUPLICATE,
    EDIT_ERROR,
    baseline_figures,
    feature_of,
    has_criteria,
    rejection,
    retain,
    unmet_criteria,
)
from .paths import reference_engine_dir, run_dir
from .proposal import Proposal
from .run_state import SKIPPED, ParentEngine, RunView, candidate_id, secret_seed
from .variation import ask_agents, build_candidate, is_budget_stop

AgentsFactory = Callable[[CostLedger], list[Agent]]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    stop_reason: str
    accepted: bool


@dataclass(frozen=True, slots=True)
class _Varied:
    out_of_dollars: bool  # the dollar cap refused an agent call
    asked: int  # slots asked
    errors: list[AgentError]  # of the slots whose agent gave no proposal

    @property
    def exhausted(self) -> bool:
        return 0 < self.asked == len(self.errors) and all(isinstance(e, AgentExhausted) for e in self.errors)


class Swarm:
    """One target's search. `start()` opens a new run, `resume(run_id)` continues one; both return when it stops."""

    def __init__(self, target: Target, *, kb: KnowledgeStore, repo: EngineRepo, executor: Executor,
                 make_agents: AgentsFactory, listeners: list[ev.Listener] | None = None):
        self.target = target
        self.kb = kb
        self.repo = repo
        self.executor = executor
        self.make_agents = make_agents
        self.listeners = list(listeners or [])
        self.key = engine_key(target)
        self.per_agent = target.candidates_per_iteration
        self._reference: str | None = None  # the reference engine's commit, once computed

    def close(self) -> None:
        self.executor.close()
        self.kb.close()

    def __enter__(self) -> Swarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # entry points

    def start(self) -> RunOutcome:
        ledger = CostLedger(self.target.budget.dollars)
        agents = self.make_agents(ledger)  # missing API keys fail here, before a run is recorded
        run_id = self.kb.next_run_id(self.target.name)
        secret = secrets.randbits(62)
        base = resolve_baseline(self.kb, self.repo, self.executor, request=self.target.baseline, key=self.key,
                                reference_dir=reference_engine_dir(self.target),
                                reference_commit=self._reference_commit(), run_id=run_id,
                                work_dir=run_dir(run_id) / "baseline_check", secret_seed=secret)
        log_ = self._open_log(run_id)
        if base.checked is not None:
            log_.emit(ev.BaselineChecked(run_id=run_id, engine_id=base.checked.id, ok=base.check_ok,
                                         summary=base.check_summary))
        self.kb.create_run(RunRecord(
            id=run_id, target_name=self.target.name, target_json=self.target.model_dump_json(),
            baseline_request=self.target.baseline, baseline_id=base.engine_id, baseline_commit=base.commit,
            engine_key=self.key, secret=secret))
        self.repo.set_run_branch(run_id, base.commit)
        return self._drive(run_id, log_, ledger, agents, resumed=False)

    def resume(self, run_id: str, skip_pending: bool = False) -> RunOutcome:
        """Go on with a stopped or crashed run. With skip_pending, the candidates left unevaluated (the interrupted
        iteration's) get a SKIPPED verdict instead of an evaluation, so the run goes on from the next iteration:
        for time-limited GPU leases, where a sibling already kept has made their parent old news."""
        run = self.kb.run(run_id)
        if run.target_name != self.target.name:
            raise ValueError(f"run {run_id} belongs to target {run.target_name!r}, not {self.target.name!r}; "
                             "pass that target's file")
        if run.state is RunState.FINISHED:
            if run.stop_reason == ACCEPTED or exhausted(self.target.budget, RunView.load(self.kb, run_id).spend(0.0)):
                return RunOutcome(run_id, run.stop_reason, run.stop_reason == ACCEPTED)
            self.kb.reopen_run(run_id)  # stopped by a budget the target file now raises: go on from where it was
        ledger = CostLedger(self.target.budget.dollars, spent_usd=run.spent_usd)
        agents = self.make_agents(ledger)
        return self._drive(run_id, self._open_log(run_id), ledger, agents, resumed=True, skip_pending=skip_pending)

    def _skip_pending(self, view: RunView, log_: ev.EventLog) -> None:
        for c in view.candidates:
            if c.state is not CandidateState.DONE:
                verdict, _ = rejection(c, SKIPPED, "not evaluated: the run resumed with --skip-pending", "engine",
                                       self.key)
                self.kb.record_outcome(verdict, None)
                log_.emit(ev.EvaluationFinished(run_id=view.run.id, candidate_id=c.id, status=SKIPPED,
                                                summary=verdict.summary, seconds=0.0))

    # the loop

    def _open_log(self, run_id: str) -> ev.EventLog:
        return ev.EventLog(run_dir(run_id) / "events.jsonl", self.listeners)

    def _drive(self, run_id: str, log_: ev.EventLog, ledger: CostLedger, agents: list[Agent], *,
               resumed: bool, skip_pending: bool = False) -> RunOutcome:
        self._session_start = time.monotonic()
        self._persisted_s = 0.0
        self.events = log_
        try:
            if resumed:  # before skipping: a held verdict's evaluation is done, only its decision is pending
                self._settle_held(run_id)
            if skip_pending:
                self._skip_pending(RunView.load(self.kb, run_id), log_)
            view = RunView.load(self.kb, run_id)
            log_.emit(ev.RunStarted(run_id=run_id, target=self.target.name, baseline_id=view.baseline.id,
                                    resumed=resumed, iterations=self.target.budget.iterations))
            for kept in view.kept:  # tags are written after the KB commit; a kill in between loses only the tag
                self.repo.tag_kept(kept.id, kept.git_commit)
            num_slots = len(agents) * self.per_agent
            while True:
                view = RunView.load(self.kb, run_id)
                iteration = view.current_iteration(num_slots)
                # A started iteration (e.g. on resume) is finished unless the budget is spent outright.
                reason = self._stop_reason(view, mid_iteration=bool(view.slots(iteration)))
                if reason:
                    break
                parent = view.parent_for(iteration)
                log_.emit(ev.IterationStarted(run_id=run_id, iteration=iteration, parent_id=parent.id,
                                              slots=num_slots))
                varied = self._vary(view, iteration, agents, num_slots, ledger)
                self._evaluate(RunView.load(self.kb, run_id), iteration)
                self._flush_elapsed(run_id)
                if varied.out_of_dollars:
                    reason = f"{DOLLARS} spent (the ledger refused a call that could cross the cap)"
                    break
                if varied.exhausted:  # asked again about the same parent, every slot would fail the same way
                    reason = (f"no agent has a candidate left for {parent.id} (iteration {iteration}); the first "
                              f"said: {varied.errors[0]}")
                    break
            self._flush_elapsed(run_id)
            self.kb.finish_run(run_id, reason)
            log_.emit(ev.RunStopped(run_id=run_id, reason=reason))
            return RunOutcome(run_id, reason, reason == ACCEPTED)
        finally:
            self._persist_elapsed(run_id)  # a crashed session still counts its wall time
            log_.close()

    def _stop_reason(self, view: RunView, *, mid_iteration: bool) -> str:
        best = view.best()
        if has_criteria(self.target.acceptance) and view.kept and \
                not unmet_criteria(self.target.acceptance, best.figures, view.speedup_vs_baseline(best)):
            return ACCEPTED
        return exhausted(self.target.budget, view.spend(self._session_s()), mid_iteration=mid_iteration)

    def _session_s(self) -> float:
        return time.monotonic() - self._session_start - self._persisted_s

    def _persist_elapsed(self, run_id: str) -> None:
        elapsed = self._session_s()
        self.kb.add_elapsed(run_id, elapsed)
        self._persisted_s += elapsed

    def _flush_elapsed(self, run_id: str) -> None:
        self._persist_elapsed(run_id)
        spend = RunView.load(self.kb, run_id).spend(0.0)
        self.events.emit(ev.SpendUpdated(run_id=run_id, iterations=spend.iterations, wall_minutes=spend.wall_minutes,
                                         gpu_hours=spend.gpu_hours, dollars=spend.dollars))

    def _engine_dir(self, run_id: str, engine_id: str, commit: str, under: str = "engines") -> Path:
        """Where an engine is evaluated from: the reference package itself when the commit is today's reference
        (the evaluator then reuses its oracle as the baseline), else a checkout under the run's directory."""
        if commit == self._reference_commit():
            return reference_engine_dir(self.target)
        return self.repo.materialise(commit, run_dir(run_id) / under / _dirname(engine_id))

    def _reference_commit(self) -> str:
        if self._reference is None:
            self._reference = self.repo.reference_commit(reference_engine_dir(self.target))
        return self._reference

    def _calibration(self, view: RunView) -> NoiseCalibration:
        """The run's A/A band: measured at its first would-be win (a run that never gets one never pays for the
        extra benchmark, and a new run's first candidates start at once), then kept in the run's record."""
        if (stored := _stored_calibration(view, self.target)) is not None:
            return stored
        # its own copy: evaluations in flight read the run's copy of the same engine, which materialising again
        # would replace under them
        baseline_dir = self._engine_dir(view.run.id, view.baseline.id, view.baseline.commit, under="calibration_engine")
        calibration = self.executor.calibrate(baseline_dir, run_dir(view.run.id) / "calibration",
                                              secret_seed(view.run, "calibration"))
        self.kb.set_calibration(view.run.id, calibration.model_dump_json())
        self.events.emit(ev.NoiseCalibrated(run_id=view.run.id, summary=(
            f"A/A noise: baseline vs itself {calibration.speedup:.3f}x (CI {calibration.ci_low:.3f}-"
            f"{calibration.ci_high:.3f}, spread {calibration.rel_iqr:.1%}, {calibration.pairs} pairs)")))
        return calibration

    def _vary(self, view: RunView, iteration: int, agents: list[Agent], num_slots: int, ledger: CostLedger
              ) -> _Varied:
        """Fill the iteration's empty slots."""
        parent = view.parent_for(iteration)
        parent_files = self.repo.files(parent.commit)
        empty = [s for s in range(num_slots) if s not in view.slots(iteration)]
        out_of_dollars, errors = False, []
        stale = _rejected_by_another_judge(view, self.target)
        # an engine rejected by another judge, or never judged (skipped), is evaluated if proposed again
        seen_trees = {self.repo.tree(c.git_commit): c.id for c in view.candidates
                      if c.git_commit and c.id not in stale and not view.skipped(c.id)}

        def context_for(slot: int):
            return build_context(self.target, self.kb, view, self.key, parent, parent_files, iteration, slot)

        for answer in ask_agents(agents, self.per_agent, empty, context_for):
            if is_budget_stop(answer):
                out_of_dollars = True
                continue
            cid = candidate_id(view.run.id, iteration, answer.slot)
            proposal = answer.proposal
            record = CandidateRecord(
                id=cid, run_id=view.run.id, iteration=iteration, slot=answer.slot, parent_id=parent.id,
                parent_commit=parent.commit, agent=answer.agent,
                title=proposal.title if proposal else "(no proposal)",
                rationale=proposal.rationale if proposal else "",
                proposal_json=proposal.model_dump_json() if proposal else "{}", git_commit="",
                state=CandidateState.PROPOSED, cost_usd=proposal.cost_usd if proposal else 0.0)
            if proposal is None:
                verdict, lesson = rejection(record, AGENT_ERROR, str(answer.error), "engine", self.key)
                self.kb.add_rejected_candidate(record, verdict, lesson)
                error = str(answer.error)
                errors.append(answer.error)
            else:
                built = build_candidate(self.repo, record, parent_files, proposal, seen_trees)
                record, error = built.record, built.error
                if error:
                    status = DUPLICATE if built.duplicate_of else EDIT_ERROR
                    verdict, lesson = rejection(record, status, error, feature_of(proposal), self.key)
                    self.kb.add_rejected_candidate(record, verdict, lesson)
                else:
                    self.kb.add_candidate(record)
            self.kb.set_spent(view.run.id, ledger.spent_usd)
            self.events.emit(ev.CandidateProposed(run_id=view.run.id, candidate_id=cid, agent=answer.agent,
                                                  title=record.title, error=error))
        return _Varied(out_of_dollars, len(empty), errors)

    def _evaluate(self, view: RunView, iteration: int) -> None:
        pending = view.unevaluated(iteration)
        if not pending:
            return
        run_id = view.run.id
        parent = view.parent_for(iteration)
        baseline_dir = self._engine_dir(run_id, parent.id, parent.commit)
        stored = _stored_calibration(view, self.target)
        jobs = []
        for c in pending:
            work = run_dir(run_id) / "work" / _dirname(c.id)
            shutil.rmtree(work, ignore_errors=True)  # a killed evaluation's leftovers
            jobs.append(EvalJob(candidate_id=c.id, candidate_dir=self._engine_dir(run_id, c.id, c.git_commit),
                                baseline_dir=baseline_dir, work_dir=work, secret_seed=secret_seed(view.run, c.id),
                                calibration=stored))
            self.kb.mark_evaluating(c.id)
        by_id = {c.id: c for c in pending}
        def proceed() -> bool:
            spend = RunView.load(self.kb, run_id).spend(self._session_s())
            return not exhausted(self.target.budget, spend, mid_iteration=True)

        def started(job: EvalJob) -> None:
            self.events.emit(ev.EvaluationStarted(run_id=run_id, candidate_id=job.candidate_id))

        for result in self.executor.evaluate_all(jobs, proceed, started):
            verdict = self._calibrated(run_id, result.job.candidate_id, result.verdict, result.seconds)
            self._retain(view, parent, by_id[result.job.candidate_id], verdict, result.seconds)
        self.repo.set_run_branch(run_id, RunView.load(self.kb, run_id).best().commit)

    def _calibrated(self, run_id: str, candidate_id: str, verdict: Verdict, seconds: float) -> Verdict:
        """A comparison judged without the run's A/A band, decided again against it: measured now for a would-be
        win, and once measured applied to every later verdict (those judged alongside the first win included).
        While the A/A benchmark runs, the verdict is held in the knowledge base: a run stopped meanwhile (a GPU
        lease's end) decides it on resume instead of evaluating the candidate again."""
        comparison = verdict.comparison
        if comparison is None or comparison.calibrated:
            return verdict
        view = RunView.load(self.kb, run_id)
        stored = _stored_calibration(view, self.target)
        if not comparison.awaits_calibration and stored is None:
            return verdict  # no win either way: not worth the A/A benchmark
        if stored is None:
            self.kb.hold_verdict(candidate_id, verdict.model_dump_json(), seconds)
        return with_calibration(verdict, self._calibration(view), self.target)

    def _settle_held(self, run_id: str) -> None:
        """Decide the verdicts that a stopped run held for its A/A calibration (measured first where the stop
        came before it was)."""
        for held in self.kb.held_verdicts(run_id):
            view = RunView.load(self.kb, run_id)
            candidate = next(c for c in view.candidates if c.id == held.candidate_id)
            verdict = Verdict.model_validate_json(held.verdict_json)
            self.events.emit(ev.EvaluationStarted(run_id=run_id, candidate_id=candidate.id))
            verdict = self._calibrated(run_id, candidate.id, verdict, held.eval_seconds)
            self._retain(view, view.parent_for(candidate.iteration), candidate, verdict, held.eval_seconds)

    def _retain(self, view: RunView, parent: ParentEngine, candidate: CandidateRecord, verdict: Verdict,
                seconds: float) -> None:
        """Record one evaluated candidate: verdict, lesson and, on PASS, a kept engine (one transaction)."""
        run_id = view.run.id
        record, lesson, kept = retain(candidate, _proposal(candidate), verdict, seconds, parent, self.key)
        self.kb.record_outcome(record, lesson, kept)
        measured = baseline_figures(verdict)
        if parent.id == view.baseline.id and measured and \
                RunView.load(self.kb, run_id).run.baseline_figures.frames_per_s is None:
            self.kb.set_baseline_figures(run_id, measured)  # the run's baseline, as this machine times it
        self.events.emit(ev.EvaluationFinished(
            run_id=run_id, candidate_id=candidate.id, status=record.status, summary=record.summary,
            seconds=seconds, speedup=record.figures.speedup))
        if kept is not None:
            self.repo.tag_kept(kept.id, kept.git_commit)
            self.events.emit(ev.EngineKept(
                run_id=run_id, candidate_id=kept.id, title=kept.title,
                speedup_vs_baseline=view.speedup_vs_baseline(kept), frames_per_s=kept.figures.frames_per_s,
                ttfa_ms=kept.figures.ttfa_ms))


ACCEPTED = "acceptance criteria met"


def _proposal(candidate: CandidateRecord) -> Proposal:
    return Proposal.model_validate_json(candidate.proposal_json)


def _dirname(engine_id: str) -> str:
    """A directory name that is also a valid Python package name (the evaluator may import it as one)."""
    return "e_" + re.sub(r"\W", "_", engine_id)


def _stored_calibration(view: RunView, target: Target) -> NoiseCalibration | None:
    """The run's A/A band; one measured before it held TTFA's, or under other benchmark settings (a target edited
    between a stop and its resume), counts as none, so the next would-be win measures it again."""
    if not view.run.calibration_json:
        return None
    stored = NoiseCalibration.model_validate_json(view.run.calibration_json)
    return stored if stored.unusable_for(benchmark_protocol(target)) is None else None


def _rejected_by_another_judge(view: RunView, target: Target) -> set[str]:
    """The run's candidates that another version of the evaluator rejected: proposed again, such an engine is
    evaluated again instead of being turned away as a duplicate (a since-fixed check may have been wrong)."""
    rejections = {s.value for s in Status if not s.is_correct}
    judge = judge_version(target)
    # read leniently: a verdict of another judge may predate or outlive fields of today's Verdict
    return {v.candidate_id for v in view.verdicts.values() if v.status in rejections and v.verdict_json
            and json.loads(v.verdict_json).get("judge", "") != judge}
