"""Run pytest tests one per process (or, with --shared, a file's tests per process), each under its own time limit,
within a total budget, and print one line per test and each failure's short traceback: made for a time-limited GPU
lease.

    python3 scripts/gpu_tests.py [--shared] --per-test-s 150 --budget-s 400 tests/gpu/test_gpu_triton_tower.py ...

One pytest run over many slow tests, cut by the lease's limit, brings back only its progress dots: not which test
failed, nor why, nor which never ran (session 6 lost a third of its device time so). Here a test that runs past
its limit is reported as a timeout and the next one starts; when the budget cannot fit another test the rest are
listed as not run. Each test's full output goes to --logs (default $OUT/gpu_tests when $OUT is set).

With --shared, a file's tests share one process, so its module fixtures (full-size weights, built engines) and
imports are paid once, not per test; each test keeps its own limit: one that runs past it is killed with the
process, reported as a timeout, and the file's remaining tests go on in a new process.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRACEBACK_LINES = 25  # of a failure's short traceback, printed after the table
SLACK_S = 5  # kept back from each test's limit for killing it and starting the next
MIN_TEST_S = 30  # a test is started only with this much time (or its whole limit, if less): a shorter start is a
# timeout by construction, and reads like a hang


@dataclass(frozen=True, slots=True)
class Outcome:
    test: str
    result: str  # "passed", "FAILED", "skipped", "TIMEOUT", "not run"
    seconds: float
    limit_s: float = 0.0
    tail: str = ""  # the short traceback of a failure, the last output of a timeout


def collect(paths: list[str], selection: str | None) -> list[str]:
    """The node ids of `paths`, each runnable from this repo's root."""
    files = [Path(p.split("::")[0]).resolve() for p in paths]
    inside = all(f.is_relative_to(ROOT) for f in files)
    # pytest names tests relative to its rootdir, which it guesses from the arguments and the working directory
    # when they lie outside this repo; fixed here, the names map back to paths
    rootdir = ROOT if inside else Path(os.path.commonpath([f if f.is_dir() else f.parent for f in files]))
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               f"--rootdir={rootdir}", *paths]
    done = subprocess.run(command + (["-k", selection] if selection else []), cwd=ROOT, capture_output=True,
                          text=True, check=False)
    tests = [line for line in done.stdout.splitlines() if "::" in line]
    if done.returncode not in (0, 5) or not tests:  # 5: nothing collected; any other: a module did not import
        raise SystemExit(f"collecting {paths} failed (exit {done.returncode}):\n{done.stdout[-4000:]}"
                         f"{done.stderr[-2000:]}")
    return [t if inside else str(rootdir / t) for t in tests]


def run_one(test: str, limit_s: float, log: Path | None) -> Outcome:
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:warnings",
               "--tb=short", test]
    started = time.perf_counter()
    # a session of its own: on a timeout the whole group goes (inductor's compile workers, evaluator workers
    # holding GPU memory), not only pytest
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, code = proc.communicate()[0], None
    seconds = time.perf_counter() - started
    if log is not None:
        log.write_text(output)
    if code is None:
        return Outcome(test, "TIMEOUT", seconds, limit_s, "\n".join(output.splitlines()[-5:]))
    if code == 0:
        if " passed" not in output:
            return Outcome(test, "skipped", seconds, limit_s)
        return Outcome(test, "passed", seconds, limit_s, _printed(output))
    return Outcome(test, "FAILED", seconds, limit_s, _failure(output))


def run_shared(tests: list[str], per_test_s: float, deadline: float, log: Path | None) -> Iterator[Outcome]:
    """`tests` (one file's) in one pytest process, each under its own limit as run_one's; after a timeout or a crash
    the rest go on in a new process. Results come from gpu_tests_plugin's events, so a killed process keeps them."""
    pending, attempt = list(tests), 0
    while pending:
        attempt += 1
        events = Path(tempfile.mkstemp(prefix="gpu_tests_", suffix=".jsonl")[1])
        output = log.with_name(f"{log.stem}.{attempt}.log") if log else events.with_suffix(".log")
        env = os.environ | {"SWARM_GPU_TESTS_EVENTS": str(events),
                            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                   "-p", "gpu_tests_plugin", "--tb=short", *pending]
        with output.open("w") as sink:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                yield from _follow(proc, events, pending, per_test_s, deadline, output)
            finally:  # the runner stopped early (Ctrl-C, an error): its tests' processes go with it
                _kill(proc)
        events.unlink(missing_ok=True)


def _follow(proc: subprocess.Popen, events: Path, pending: list[str], per_test_s: float, deadline: float,
            output: Path) -> Iterator[Outcome]:
    """Outcomes of `proc`'s tests as their events arrive, removed from `pending`; kills the process when its
    current test passes its limit, or when the budget cannot fit the next test (the rest are then not run)."""
    read, current, since, limit = 0, None, 0.0, 0.0
    while True:
        code = proc.poll()
        with events.open() as f:
            f.seek(read)
            lines = f.read()
        complete = lines[:lines.rfind("\n") + 1]
        read += len(complete)
        for event in map(json.loads, complete.splitlines()):
            # pytest names a test relative to its rootdir, which for files outside this repo is not collect's
            test = next(t for t in pending if t == event["test"] or t.endswith("/" + event["test"]))
            if event["event"] == "start":
                current, since = test, time.perf_counter()
                limit = _limit(per_test_s, deadline)
                if limit is None:
                    _kill(proc)
                    yield from (Outcome(t, "not run", 0.0) for t in pending)
                    pending.clear()
                    return
            else:
                tail = _printed(event["tail"]) if event["result"] == "passed" else \
                    _last_lines(event["tail"], TRACEBACK_LINES)
                pending.remove(test)
                current = None
                yield Outcome(test, event["result"], event["seconds"], limit, tail)
        if code is not None:
            break
        if current is not None and time.perf_counter() - since > limit:
            _kill(proc)
            pending.remove(current)
            yield Outcome(current, "TIMEOUT", time.perf_counter() - since, limit, _last_lines(output, 5))
            return
        time.sleep(0.2)
    if current is not None:  # the process died inside a test (a crash, not an assertion)
        pending.remove(current)
        yield Outcome(current, "FAILED", time.perf_counter() - since, limit, _last_lines(output, TRACEBACK_LINES))
    elif pending:  # it ended without starting them: report rather than loop
        yield from (Outcome(t, "FAILED", 0.0, 0.0, _last_lines(output, TRACEBACK_LINES)) for t in pending)
        pending.clear()


def _kill(proc: subprocess.Popen) -> None:
    """The process and what it started (inductor's compile workers, evaluator workers holding GPU memory)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # every process of its group has ended
        pass
    proc.wait()


def _last_lines(text: str | Path, lines: int) -> str:
    """The last `lines` of a text, or of a log file's."""
    if isinstance(text, Path):
        text = text.read_text(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _limit(per_test_s: float, deadline: float) -> float | None:
    """A test starting now gets this limit, or None: the budget cannot fit it (see MIN_TEST_S)."""
    limit = min(per_test_s, deadline - time.perf_counter() - SLACK_S)
    return limit if limit >= min(MIN_TEST_S, per_test_s) else None


def _printed(output: str) -> str:
    """What a passing test printed itself (timings, ratios): the lines before pytest's summary."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("=")
             and line.strip(".sFE") and " passed" not in line]
    return "\n".join(lines[-5:])


def _failure(output: str) -> str:
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("___")), max(len(lines) - TRACEBACK_LINES, 0))
    return "\n".join(lines[start:start + TRACEBACK_LINES])


def _log(logs: Path | None, name: str) -> Path | None:
    return logs / (name.replace("/", "_").replace("::", "__")[:150] + ".log") if logs else None


def _one_by_one(tests: list[str], args: argparse.Namespace, started: float) -> Iterator[Outcome]:
    for test in tests:
        limit = _limit(args.per_test_s, started + args.budget_s)
        if limit is None:
            yield Outcome(test, "not run", 0.0)
            continue
        yield run_one(test, limit, _log(args.logs, test))


def _shared(tests: list[str], args: argparse.Namespace, started: float) -> Iterator[Outcome]:
    deadline = started + args.budget_s
    for file, group in groupby(tests, key=lambda t: t.split("::")[0]):
        if _limit(args.per_test_s, deadline) is None:
            yield from (Outcome(t, "not run", 0.0) for t in group)  # no process started for nothing
            continue
        yield from run_shared(list(group), args.per_test_s, deadline, _log(args.logs, file))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test files or node ids")
    parser.add_argument("-k", dest="selection", help="pytest -k expression")
    parser.add_argument("--per-test-s", type=float, default=150, help="time limit of one test")
    parser.add_argument("--budget-s", type=float, default=540, help="start no test that could end past this")
    parser.add_argument("--shared", action="store_true",
                        help="a file's tests in one process (its fixtures built once), each still under its limit")
    parser.add_argument("--logs", type=Path, default=Path(os.environ["OUT"]) / "gpu_tests" if "OUT" in os.environ
                        else None, help="folder for each test's full output")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    outcomes = []
    tests = collect(args.paths, args.selection)
    for o in _shared(tests, args, started) if args.shared else _one_by_one(tests, args, started):
        outcomes.append(o)
        if o.result != "not run":
            print(f"{o.result:8} {o.seconds:6.1f} s of {o.limit_s:4.0f}  {o.test}", flush=True)
    print("\n".join(f"\n--- {o.result} {o.test}\n{o.tail}" for o in outcomes if o.tail))
    counts = {r: sum(o.result == r for o in outcomes) for r in ("passed", "FAILED", "TIMEOUT", "skipped", "not run")}
    print(", ".join(f"{n} {r}" for r, n in counts.items() if n))
    return 0 if counts["passed"] + counts["skipped"] == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
