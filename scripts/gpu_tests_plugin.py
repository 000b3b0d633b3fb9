"""pytest plugin of scripts/gpu_tests.py --shared: each test's start and its result as JSON lines appended to
$SWARM_GPU_TESTS_EVENTS as they happen, so that the runner knows which test a hang is in and keeps every result
that came before it, however the process ends."""
from __future__ import annotations

import json
import os

_PHASES: dict[str, list] = {}  # nodeid -> its phases' reports so far


def _write(event: dict) -> None:
    with open(os.environ["SWARM_GPU_TESTS_EVENTS"], "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _write({"test": nodeid, "event": "start"})


def pytest_runtest_logreport(report):
    _PHASES.setdefault(report.nodeid, []).append(report)


def pytest_runtest_logfinish(nodeid, location):
    reports = _PHASES.pop(nodeid, [])
    failed = next((r for r in reports if r.failed), None)
    if failed is not None:
        result, tail = "FAILED", failed.longreprtext
    elif any(r.skipped for r in reports):
        result, tail = "skipped", ""
    else:
        result, tail = "passed", "".join(r.capstdout for r in reports if r.when == "call")
    _write({"test": nodeid, "event": "result", "result": result, "seconds": sum(r.duration for r in reports),
            "tail": tail})
