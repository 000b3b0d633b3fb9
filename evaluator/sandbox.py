"""The judge's handle on one worker: spawn it confined, talk to it with deadlines, freeze, kill, classify.

Each engine runs in a fresh exec'd `python -m evaluator.worker` (own session, own uid, allow-listed environment),
the candidate copied read-only and imported under a neutral name. Every exchange has a deadline and a /proc RSS
watch; on expiry or overuse the whole worker (group and uid) is SIGKILLed. Timeouts, exits, signals, tracebacks,
CUDA faults and garbled channels all become a WorkerFailure with a Status and the log tail.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from targets.schema import Target

from . import live_workers, procs
from .channel import (
    DEVICE_OOM_FIX,
    ChannelClosed,
    ChannelTimeout,
    JudgeChannel,
    ProtocolError,
    WorkerInit,
    cuda_failure,
)
from .compile_cache import CompileCache
from .confine import Confinement
from .devices import worker_devices
from .verdict import Status

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = REPO_ROOT / "reference_runtime" / "model"
ORACLE_PACKAGE = "reference_runtime.model"
NEUTRAL_PACKAGE = "engine_under_test"
PASS_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
            "TRITON_PTXAS_PATH", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG")
# cuBLAS documents bitwise-repeatable results with several CUDA streams active only when this is set, and engines
# run work on two streams (a codec beside the frames); the cascade holds a stream's frames to its own generate's
# bit for bit. Every worker (candidate, baseline, oracle) gets it, so timings stay side by side; a judge that sets
# its own passes it on.
CUBLAS_REPRODUCIBLE = ":4096:8"
UID_BASE, UID_SPAN = 3_000_000, 1_000_000
RSS_CHECK_S = 0.25
LOG_TAIL_CHARS = 4000
CATEGORY_STATUS = {"oom": Status.OOM, "cuda_fault": Status.CUDA_FAULT, "violation": Status.CHEAT_SUSPECTED}


class WorkerFailure(Exception):
    def __init__(self, role: str, status: Status, message: str, log_tail: str = "", stage: str = ""):
        super().__init__(f"{role}: {message}")
        self.role, self.status, self.message, self.log_tail = role, status, message, log_tail
        self.stage = stage  # the stage whose time limit it ran past (a TIMEOUT)


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # time.perf_counter() value
    stage: str
    limit_s: float

    @classmethod
    def after(cls, seconds: float, stage: str) -> Deadline:
        return cls(time.perf_counter() + seconds, stage, seconds)


@dataclass(frozen=True, slots=True)
class Ready:
    fingerprint: str  # of the weights as loaded, before the engine package was imported
    build_s: float
    hardware: str
    software: str


def copy_package(source: Path, dest: Path) -> None:
    """A read-only copy; symlinks stay links, so a link to a secret is not copied as root-readable content."""
    if not (source / "__init__.py").is_file():
        raise FileNotFoundError(f"{source} is not an engine package (no __init__.py); a candidate is a copy of "
                                f"{REFERENCE_DIR.relative_to(REPO_ROOT)}/")
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for root, _, files in os.walk(dest):
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o444)
        os.chmod(root, 0o555)


def _fresh_uid() -> int | None:
    if os.geteuid() != 0:
        return None
    while procs.uid_in_use(uid := UID_BASE + secrets.randbelow(UID_SPAN)):
        pass
    return uid


def _environment(visible_gpus: str | None, cpu_threads: int | None) -> dict[str, str]:
    """An allow-list (no API keys or tokens); HOME and TMPDIR become the private tmp in confine()."""
    env = {"CUBLAS_WORKSPACE_CONFIG": CUBLAS_REPRODUCIBLE} | {k: v for k, v in os.environ.items() if k in PASS_ENV}
    if visible_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_gpus
    if cpu_threads is not None:  # read by torch's and oneDNN's OpenMP pools when they start
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cpu_threads)
    # The harness's own PYTHONPATH entries follow the repo: packages installed with `pip --target` must be
    # importable by the worker exactly as by the harness.
    path = os.pathsep.join([str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    return env | {"PYTHONPATH": path, "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1",
                  "PYTHONNOUSERSITE": "1"}


class Worker:
    """One live worker. `call`/`stream` raise WorkerFailure (after killing it) on anything but a proper reply."""

    def __init__(self, role: str, target: Target, package_dir: Path | None, work_dir: Path,
                 gpu_index: int | None = None, seed: tuple[CompileCache, Path] | None = None):
        self.role = role
        devices = worker_devices(target.hardware, gpu_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.uid = _fresh_uid()
        self.limit_bytes = (target.hardware.memory_limit_gib or 0) * 2**30
        home = work_dir / role
        home.mkdir(parents=True)
        home.chmod(0o711)
        self.tmp = tmp = home / "tmp"
        (tmp / "pkgs").mkdir(parents=True)  # mount point of the read-only package (confine.py)
        if self.uid is not None:
            os.chown(tmp, self.uid, self.uid)
            tmp.chmod(0o700)
        self.seeded = seed is not None and seed[0].plant(seed[1], tmp, self.uid)
        package_root = None
        if package_dir is not None:
            package_root = home / "pkgs"
            copy_package(Path(package_dir), package_root / NEUTRAL_PACKAGE)
        self.log_path = home / "log"
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "evaluator.worker", "--fd-in", str(to_child_r), "--fd-out", str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=_environment(devices.visible, target.hardware.cpu_threads), cwd=tmp, start_new_session=True,
                close_fds=True)
        finally:
            for fd in (to_child_r, from_child_w, log):
                os.close(fd)
        self.channel = JudgeChannel(from_child_r, to_child_w)
        live_workers.add(self)
        self._last_rss_check = 0.0
        self.frozen = False
        self.notes: list[str] = []  # what confine() could not apply, from the worker's first message
        self.busy_s = 0.0  # answering the judge's calls and streams, its build excluded
        init = WorkerInit(role=role, package=ORACLE_PACKAGE if package_dir is None else NEUTRAL_PACKAGE,
                          confinement=Confinement(str(tmp), None if package_root is None else str(package_root),
                                                  self.uid),
                          config=target.model.config, weights=target.model.weights,
                          weights_seed=target.model.weights_seed, device=devices.device,
                          codec_device=devices.codec_device)
        self._send(init, Deadline.after(30, "build"))

    # ---- exchanges

    def ready(self, deadline: Deadline) -> Ready:
        """Wait for the confinement report (sent before any engine code ran: kept in `notes`), then the build;
        an exception raised while importing or building is a build_error."""
        confined = self._expect(self._recv(deadline)[0], "confined")
        self.notes = [str(n) for n in confined.get("notes", [])]
        reply = self._expect(self._recv(deadline, exception=Status.BUILD_ERROR)[0], "ready")
        try:
            return Ready(fingerprint=str(reply["fingerprint"]), build_s=float(reply["build_s"]),
                         hardware=str(reply["hardware"]), software=str(reply["software"]))
        except (KeyError, TypeError, ValueError) as e:
            self.kill()
            raise WorkerFailure(self.role, Status.CHEAT_SUSPECTED, f"malformed ready message ({e!r})") from e

    def call(self, op: str, deadline: Deadline, kind: str, **args) -> dict:
        started = time.perf_counter()
        self._send({"op": op, **args}, deadline)
        reply = self._expect(self._recv(deadline)[0], kind)
        self.busy_s += time.perf_counter() - started
        return reply

    def stream(self, deadline: Deadline, **args) -> Iterator[tuple[dict, float]]:
        """Yields (message, arrival time) for each chunk and the final `done`; the first item is the send time."""
        sent = time.perf_counter()
        self._send({"op": "stream", **args}, deadline)
        yield {"kind": "sent"}, sent
        while True:
            message, arrived = self._recv(deadline)
            yield self._expect(message, "chunk", "done"), arrived
            if message["kind"] == "done":
                self.busy_s += arrived - sent
                return

    # ---- process control

    def freeze(self) -> None:
        """SIGSTOP every process of the worker, so an idle engine cannot load the machine while another is timed."""
        if not self.frozen:
            procs.signal_all(self.proc.pid, self.uid, signal.SIGSTOP)
            self.frozen = True

    def thaw(self) -> None:
        if self.frozen:
            procs.signal_all(self.proc.pid, self.uid, signal.SIGCONT)
            self.frozen = False

    def terminate(self) -> None:
        """Kill its processes from any thread; the owning thread then sees the exit and closes the channel."""
        procs.kill_all(self.proc.pid, self.uid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.terminate()
        live_workers.discard(self)
        self.channel.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (e.g. a GPU driver call): give up on reaping rather than block

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - LOG_TAIL_CHARS))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # ---- internals

    def _send(self, message: object, deadline: Deadline) -> None:
        try:
            self.channel.send(message, deadline.at, self._tick)
        except (ChannelTimeout, ChannelClosed) as e:
            raise self._failure(e, deadline) from e

    def _recv(self, deadline: Deadline, exception: Status = Status.CRASH) -> tuple[dict, float]:
        """The next message; an `error` reply raises, a Python exception counting as `exception`."""
        try:
            message, arrived = self.channel.recv(deadline.at, self._tick)
        except (ChannelTimeout, ChannelClosed, ProtocolError) as e:
            raise self._failure(e, deadline) from e
        if message["kind"] == "error":
            self.kill()
            status = CATEGORY_STATUS.get(str(message.get("category")), exception)
            raise WorkerFailure(self.role, status, str(message.get("message", "")), self.log_tail())
        return message, arrived

    def _expect(self, message: dict, *kinds: str) -> dict:
        if message["kind"] not in kinds:
            self.kill()
            raise WorkerFailure(self.role, Status.CHEAT_SUSPECTED,
                                f"sent a {message['kind']!r} message where {' or '.join(kinds)} was due")
        return message

    def _tick(self) -> None:
        if self.proc.poll() is not None:
            raise ChannelClosed("the worker exited")
        now = time.perf_counter()
        if self.limit_bytes and now - self._last_rss_check >= RSS_CHECK_S:
            self._last_rss_check = now
            rss = sum(p.rss_bytes for p in procs.members(self.proc.pid, self.uid))
            if rss > self.limit_bytes:
                self.kill()
                raise WorkerFailure(self.role, Status.OOM, f"resident memory {rss / 2**30:.2f} GiB went over "
                                    f"hardware.memory_limit_gib = {self.limit_bytes / 2**30:g}", self.log_tail())

    def _failure(self, cause: Exception, deadline: Deadline) -> WorkerFailure:
        if isinstance(cause, ChannelTimeout):
            self.kill()
            return WorkerFailure(self.role, Status.TIMEOUT, f"ran past the {deadline.stage} time limit "
                                 f"({deadline.limit_s:g} s)", self.log_tail(), deadline.stage)
        if isinstance(cause, ProtocolError):
            self.kill()
            return WorkerFailure(self.role, Status.CHEAT_SUSPECTED, f"garbled result channel: {cause}",
                                 self.log_tail())
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        return _exit_failure(self.role, code, self.log_tail())


def _exit_failure(role: str, code: int | None, tail: str) -> WorkerFailure:
    """Classify a worker that went away without a reply, from its exit code and log."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        if code == -signal.SIGKILL:
            return WorkerFailure(role, Status.OOM, "killed by SIGKILL (the kernel's OOM killer?)", tail)
        return WorkerFailure(role, Status.CRASH, f"killed by {name}", tail)
    failure = cuda_failure(tail)
    if failure == "oom":
        return WorkerFailure(role, Status.OOM, f"a device allocation failed (see the log tail): {DEVICE_OOM_FIX}", tail)
    if failure == "cuda_fault":
        return WorkerFailure(role, Status.CUDA_FAULT, "CUDA fault (see the log tail)", tail)
    if "MemoryError" in tail or "OutOfMemoryError" in tail:
        return WorkerFailure(role, Status.OOM, "ran out of memory (see the log tail)", tail)
    what = "closed its channel and hung" if code is None else f"exited with code {code}"
    return WorkerFailure(role, Status.CRASH, f"{what} without replying", tail)


class Pool:
    """The workers of one evaluation. `use(w)` thaws `w` and freezes the others, so only the engine being asked
    runs (an idle engine's background threads cannot slow the one being timed); `close()` kills them all.
    With a compile cache, every engine worker starts from the baseline's seed (compile_cache.py)."""

    def __init__(self, target: Target, work_dir: Path, gpu_index: int | None,
                 seed: tuple[CompileCache, Path] | None = None):
        self.target, self.work_dir, self.gpu_index, self.seed = target, work_dir, gpu_index, seed
        self.workers: list[Worker] = []

    def start(self, role: str, package_dir: Path | None) -> Worker:
        worker = Worker(role, self.target, package_dir, self.work_dir, self.gpu_index,
                        None if package_dir is None else self.seed)  # the oracle runs eagerly: nothing to reuse
        self.workers.append(worker)
        return worker

    def use(self, worker: Worker) -> Worker:
        for other in self.workers:
            if other is not worker:
                other.freeze()
        worker.thaw()
        return worker

    def close(self, trusted: Worker | None = None) -> None:
        """Kill every worker and wipe its tmp dir and package copy (the logs stay); first, with a compile cache, a
        `trusted` worker (a baseline) still alive, so it served the whole evaluation, leaves its caches as the
        seed."""
        harvest = self.seed is not None and trusted is not None and trusted.alive()
        for worker in self.workers:
            worker.kill()
        if harvest:
            self.seed[0].harvest(trusted.tmp, self.seed[1])
        for worker in self.workers:
            for scratch in ("tmp", "pkgs"):
                shutil.rmtree(worker.log_path.parent / scratch, ignore_errors=True)
