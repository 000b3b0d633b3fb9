"""The live processes on this machine, read from /proc, for tests that follow the evaluator's workers and what they
start (the fork bomb's process group, a signalled swarm's workers, a sandbox escapee)."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    parent: int
    group: int
    args: tuple[bytes, ...]

    @property
    def is_worker(self) -> bool:
        """An evaluator worker (`python -m evaluator.worker ...`)."""
        return b"evaluator.worker" in self.args


def _stat(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields after "pid (comm)": state ppid pgrp ...; OSError once the process is gone."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def live_processes() -> dict[int, Process]:
    """Every process that is not a zombie, by pid; those exiting while we look are left out."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(entry.name)
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = tuple(f.read().split(b"\0"))
        except OSError:
            continue
        if fields[0] != "Z":
            pid = int(entry.name)
            found[pid] = Process(pid, int(fields[1]), int(fields[2]), args)
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False
