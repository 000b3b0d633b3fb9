"""The processes that belong to one worker, found from /proc by process group and by the worker's own uid.

Finding them by uid as well as by group matters: a candidate can setsid() or double-fork out of its group, but
it cannot leave its uid, so kill, freeze and the RSS sum still reach every process it started.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    pgrp: int
    uid: int
    rss_bytes: int


def _read(pid: str) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status") as f:
            uid_line = next(line for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None  # exited while we looked
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
    if fields[0] == "Z":
        return None  # a zombie holds nothing and cannot be signalled away; its parent reaps it
    return Proc(int(pid), int(fields[2]), int(uid_line.split()[1]), int(fields[21]) * PAGE)


def members(leader: int, uid: int | None) -> list[Proc]:
    """Every live process in `leader`'s group or (when the worker has its own uid) running as `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        proc = _read(entry.name)
        if proc is not None and (proc.pid == leader or proc.pgrp == leader or (uid is not None and proc.uid == uid)):
            found.append(proc)
    return found


def threads_of(uid: int) -> int:
    """Threads whose real uid is `uid`: what RLIMIT_NPROC counts."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("Uid:", "Threads:")))
        except OSError:
            continue  # exited while we looked
        if int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


def uid_in_use(uid: int) -> bool:
    return any(p.uid == uid for p in (_read(e.name) for e in os.scandir("/proc") if e.name.isdigit()) if p)


def signal_all(leader: int, uid: int | None, sig: int) -> int:
    """Send `sig` to every member; returns how many were signalled."""
    sent = 0
    for proc in members(leader, uid):
        try:
            os.kill(proc.pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(leader, sig)
    except (ProcessLookupError, PermissionError):
        pass
    return sent


def kill_all(leader: int, uid: int | None, rounds: int = 20) -> None:
    """SIGKILL until nothing is left (a fork loop may spawn between scans); SIGCONT so stopped ones die too."""
    for _ in range(rounds):
        if signal_all(leader, uid, signal.SIGKILL) == 0:
            return
        signal_all(leader, uid, signal.SIGCONT)
