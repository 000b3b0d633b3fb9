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
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACEBACK_LINES = 25  # of a failure's short traceback, printed after the table
SLACK_S = 5  # a test is started only when this much of the budget is left past its start-up


@dataclass(frozen=True, slots=True)
class Outcome:
    test: str
    result: str  # "passed", "FAILED", "skipped", "TIMEOUT", "not run"
    seconds: float
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
    if not tests:
        raise SystemExit(f"no tests collected from {paths}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return [t if inside else str(rootdir / t) for t in tests]


def run_one(test: str, limit_s: float, log: Path | None) -> Outcome:
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--tb=short", "-W",
               "ignore::UserWarning", "-W", "ignore::DeprecationWarning", test]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit_s, check=False)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output, code = _text(e.stdout) + _text(e.stderr), None
    seconds = time.perf_counter() - started
    if log is not None:
        log.write_text(output)
    if code is None:
        return Outcome(test, "TIMEOUT", seconds, "\n".join(output.splitlines()[-5:]))
    if code == 0:
        return Outcome(test, "skipped" if " skipped" in output and " passed" not in output else "passed", seconds,
                       _printed(output))
    return Outcome(test, "FAILED", seconds, _failure(output))


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def _printed(output: str) -> str:
    """What a passing test printed itself (timings, ratios): the lines before pytest's summary."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith(("=", "."))
             and " passed" not in line and "warnings summary" not in line]
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
        left = args.budget_s - (time.perf_counter() - started)
        if left < SLACK_S + 10:
            outcomes.append(Outcome(test, "not run", 0.0))
            continue
        log = args.logs / (test.replace("/", "_").replace("::", "__")[:150] + ".log") if args.logs else None
        outcomes.append(run_one(test, min(args.per_test_s, left - SLACK_S), log))
        print(f"{outcomes[-1].result:8} {outcomes[-1].seconds:6.1f} s  {test}", flush=True)
    print("\n".join(f"\n--- {o.result} {o.test}\n{o.tail}" for o in outcomes if o.tail))
    counts = {r: sum(o.result == r for o in outcomes) for r in ("passed", "FAILED", "TIMEOUT", "skipped", "not run")}
    print(", ".join(f"{n} {r}" for r, n in counts.items() if n))
    return 0 if not (counts["FAILED"] or counts["TIMEOUT"]) else 1


if __name__ == "__main__":
    sys.exit(main())
