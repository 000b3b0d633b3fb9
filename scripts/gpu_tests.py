"""Run pytest tests one per process, each under its own time limit, within a total budget, and print one line per
test and each failure's short traceback: made for a time-limited GPU lease.

    python3 scripts/gpu_tests.py --per-test-s 150 --budget-s 400 tests/gpu/test_gpu_triton_tower.py ...

One pytest run over many slow tests, cut by the lease's limit, brings back only its progress dots: not which test
failed, nor why, nor which never ran (session 6 lost a third of its device time so). Here a test that runs past
its limit is reported as a timeout and the next one starts; when the budget cannot fit another test the rest are
listed as not run. Each test's full output goes to --logs (default $OUT/gpu_tests when $OUT is set).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def _printed(output: str) -> str:
    """What a passing test printed itself (timings, ratios): the lines before pytest's summary."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("=")
             and line.strip(".sFE") and " passed" not in line]
    return "\n".join(lines[-5:])


def _failure(output: str) -> str:
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("___")), max(len(lines) - TRACEBACK_LINES, 0))
    return "\n".join(lines[start:start + TRACEBACK_LINES])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test files or node ids")
    parser.add_argument("-k", dest="selection", help="pytest -k expression")
    parser.add_argument("--per-test-s", type=float, default=150, help="time limit of one test")
    parser.add_argument("--budget-s", type=float, default=540, help="start no test that could end past this")
    parser.add_argument("--logs", type=Path, default=Path(os.environ["OUT"]) / "gpu_tests" if "OUT" in os.environ
                        else None, help="folder for each test's full output")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for test in collect(args.paths, args.selection):
        limit = min(args.per_test_s, args.budget_s - (time.perf_counter() - started) - SLACK_S)
        if limit < min(MIN_TEST_S, args.per_test_s):
            outcomes.append(Outcome(test, "not run", 0.0))
            continue
        log = args.logs / (test.replace("/", "_").replace("::", "__")[:150] + ".log") if args.logs else None
        o = run_one(test, limit, log)
        outcomes.append(o)
        print(f"{o.result:8} {o.seconds:6.1f} s of {o.limit_s:4.0f}  {test}", flush=True)
    print("\n".join(f"\n--- {o.result} {o.test}\n{o.tail}" for o in outcomes if o.tail))
    counts = {r: sum(o.result == r for o in outcomes) for r in ("passed", "FAILED", "TIMEOUT", "skipped", "not run")}
    print(", ".join(f"{n} {r}" for r, n in counts.items() if n))
    return 0 if counts["passed"] + counts["skipped"] == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
