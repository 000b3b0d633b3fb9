"""Every live worker of this process, so that an interrupt (Ctrl-C, SIGTERM) kills them all at once. Workers run
in their own sessions (and uids), so neither signal reaches them; an orphan would keep its GPU memory and CPUs
busy under the next run."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .verdict import EvaluatorError

if TYPE_CHECKING:
    from .sandbox import Worker

# Reentrant: stop_all() runs from a signal handler, which can interrupt the main thread inside add() or discard().
_lock = threading.RLock()
_live: set[Worker] = set()
_stopping = threading.Event()


class Interrupted(EvaluatorError):
    """A worker was asked for after stop_all(): the process is being interrupted."""


def add(worker: Worker) -> None:
    with _lock:
        _live.add(worker)
    if _stopping.is_set():  # started while stop_all() ran: it would otherwise outlive the interrupt
        worker.kill()
        raise Interrupted("interrupted: no new workers start")


def discard(worker: Worker) -> None:
    with _lock:
        _live.discard(worker)


def stop_all() -> int:
    """Kill every live worker and refuse new ones for the rest of this process; returns how many were killed."""
    _stopping.set()
    with _lock:
        workers = list(_live)
    for worker in workers:
        worker.terminate()  # not kill(): closing a channel another thread is reading could hand it a reused fd
    return len(workers)
