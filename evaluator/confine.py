"""Worker-side confinement, applied by harness code before any candidate code is imported (as root).

New network and IPC namespaces (loopback only, no SysV/POSIX IPC shared with anyone); new mount namespace with
every host mount read-only, /tmp, /var/tmp = the private tmp, a fresh small /dev/shm and the package bind-mounted
read-only; then a fresh uid per worker (no signalling/ptrace between workers, every process findable by uid),
RLIMIT_NPROC, no_new_privs. A refused step becomes a note in the verdict; only a capability drop failing after
the uid change raises (root's permitted capabilities must not survive).
"""
from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import procs

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
# statvfs flag -> mount flag, kept when a mount is made read-only
KEPT_FLAGS = {os.ST_NOSUID: 2, os.ST_NODEV: 4, os.ST_NOEXEC: 8, os.ST_NOATIME: 1024, os.ST_NODIRATIME: 2048,
              os.ST_RELATIME: 1 << 21}
# left writable: per-process and kernel files, which no unprivileged uid can use to keep data
KERNEL_MOUNTS = ("/proc", "/sys")
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS = 1, 8, 38
CAP_DAC_READ_SEARCH = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
NPROC_LIMIT = 1024  # threads count too: torch and CUDA start tens of them per worker
FSIZE_LIMIT = 4 << 30
SHM_SIZE = "512m"


@dataclass(frozen=True, slots=True)
class Confinement:
    """What the judge asks for. `uid` None = leave the uid alone (the judge is not root)."""

    private_tmp: str
    package_root: str | None  # the directory holding the candidate package (mounted read-only)
    uid: int | None


@dataclass(slots=True)
class Confined:
    """What was applied: where the package and the tmp dir are now, and a note for each skipped step."""

    package_root: str | None
    tmp: str
    notes: list[str] = field(default_factory=list)


def confine(c: Confinement) -> Confined:
    out = Confined(package_root=c.package_root, tmp=c.private_tmp)
    judge = os.getppid()
    _limit(resource.RLIMIT_CORE, 0, out)
    _limit(resource.RLIMIT_FSIZE, FSIZE_LIMIT, out)
    if os.geteuid() != 0:
        out.notes.append("not root: no network/mount namespace and no uid drop; the worker keeps the host "
                         "network and the judge's uid (run the evaluator as root to confine workers)")
        _cap_processes(out)
        _home(out.tmp)
        _die_with_judge(judge, out)
        return out
    _unshare(CLONE_NEWNET, "network namespace", out)
    _unshare(CLONE_NEWIPC, "IPC namespace", out)
    if _unshare(CLONE_NEWNS, "mount namespace", out):
        _private_mounts(c, out)
    _drop_privileges(c.uid, out)
    _home(out.tmp)
    _die_with_judge(judge, out)
    return out


def _die_with_judge(judge: int, out: Confined) -> None:
    """A worker must not outlive a judge killed with SIGKILL (it would burn CPU or GPU time unseen). Armed after
    the uid drop, which clears the parent-death signal."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        out.notes.append(f"parent-death signal refused (errno {ctypes.get_errno()}): a killed judge leaves it running")
    if os.getppid() != judge:  # the judge died before the signal was armed
        os._exit(1)


def _home(tmp: str) -> None:
    """Every cache and temp file goes to the private tmp (wiped with the worker). USER/LOGNAME: the fresh uid has no
    passwd entry, and getpass.getuser() (inductor's and triton's cache paths) raises without them."""
    os.environ.update(USER="swarm-worker", LOGNAME="swarm-worker", HOME=tmp, TMPDIR=tmp,
                      XDG_CACHE_HOME=f"{tmp}/.cache", TRITON_CACHE_DIR=f"{tmp}/.triton",
                      TORCHINDUCTOR_CACHE_DIR=f"{tmp}/.inductor")
    tempfile.tempdir = None


def _cap_processes(out: Confined) -> None:
    """Without a uid of its own, cap the judge's uid at the threads it runs now + NPROC_LIMIT: a fork bomb would
    otherwise take every pid on the machine."""
    value = procs.threads_of(os.getuid()) + NPROC_LIMIT
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    _limit(resource.RLIMIT_NPROC, value if hard == resource.RLIM_INFINITY else min(value, hard), out)


def _private_mounts(c: Confinement, out: Confined) -> None:
    if not _mount(None, "/", None, MS_REC | MS_PRIVATE, None, out):
        return
    tmp = Path(c.private_tmp)
    _read_only_host(out)
    # the private tmp alone stays writable: a bind inherits read-only, so remount it writable
    if _mount(str(tmp), str(tmp), None, MS_BIND, None, out) and _remount(str(tmp), 0, out):
        os.chdir(tmp)  # onto the new mount
    if c.package_root is not None:
        target = tmp / "pkgs"
        if _mount(c.package_root, str(target), None, MS_BIND | MS_REC, None, out) and \
                _remount(str(target), MS_RDONLY, out):
            out.package_root = str(target)
    hidden = [p for p in _import_roots() if _under(p, ("/tmp", "/var/tmp"))]
    if hidden:
        out.notes.append(f"kept the host /tmp: {hidden[0]} is under it and must stay importable")
    elif _mount(str(tmp), "/tmp", None, MS_BIND | MS_REC, None, out):
        if out.package_root == str(tmp / "pkgs"):
            out.package_root = "/tmp/pkgs"
        out.tmp = "/tmp"
        if Path("/var/tmp").is_dir():
            _mount("/tmp", "/var/tmp", None, MS_BIND | MS_REC, None, out)
    _mount("tmpfs", "/dev/shm", "tmpfs", 0, f"size={SHM_SIZE},mode=1777", out)


def _read_only_host(out: Confined) -> None:
    """Remount every host mount read-only in this namespace: world-writable places such as /run/lock would
    otherwise take writes outside the private tmp, e.g. a cache that outlives the evaluation (E25)."""
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f]
    for point in points:
        if not _under(point, KERNEL_MOUNTS) and os.path.exists(point):
            _remount(point, MS_RDONLY, out)


def _remount(point: str, read_only: int, out: Confined) -> bool:
    """Bind-remount `point` read-only (MS_RDONLY) or writable (0), keeping its nosuid/nodev/noexec/atime flags."""
    current = os.statvfs(point).f_flag
    kept = sum(flag for st, flag in KEPT_FLAGS.items() if current & st)
    return _mount(None, point, None, MS_BIND | MS_REMOUNT | read_only | kept, None, out)


def _drop_privileges(uid: int | None, out: Confined) -> None:
    if uid is None:
        out.notes.append("no uid given: the worker stays root")
        return
    libc = ctypes.CDLL(None, use_errno=True)
    unreadable = [p for p in _import_roots() if not _world_readable(p)]
    keep_read = bool(unreadable)
    try:
        if keep_read:
            libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if keep_read:
            _capset(libc, 1 << CAP_DAC_READ_SEARCH)
            out.notes.append(
                f"{unreadable[0]} is not world-readable, so the worker (uid {uid}) keeps CAP_DAC_READ_SEARCH to "
                "import from it: it can read any file but write only its tmp (install Python and the repo in "
                "world-readable directories to drop this)")
        _limit(resource.RLIMIT_NPROC, NPROC_LIMIT, out)
    except OSError as e:
        out.notes.append(f"uid drop to {uid} failed ({e}); the worker stays root")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        out.notes.append(f"no_new_privs refused (errno {ctypes.get_errno()})")


def _capset(libc: ctypes.CDLL, mask: int) -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)()
    data[0].effective = data[0].permitted = mask
    if libc.capset(ctypes.byref(Header(LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise RuntimeError(f"capset failed (errno {ctypes.get_errno()}) after the uid drop: refusing to run with "
                           "root's permitted capabilities")


def _unshare(flag: int, what: str, out: Confined) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flag) == 0:
        return True
    out.notes.append(f"{what} refused (errno {ctypes.get_errno()}: {os.strerror(ctypes.get_errno())})")
    return False


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None, out: Confined) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(*(None if a is None else a.encode() for a in (src, target, fstype)), flags,
                  None if data is None else data.encode()) == 0:
        return True
    err = ctypes.get_errno()
    out.notes.append(f"mount {src or ''} -> {target} refused (errno {err}: {os.strerror(err)})")
    return False


def _limit(which: int, value: int, out: Confined) -> None:
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError) as e:
        out.notes.append(f"setrlimit {which} = {value} refused ({e})")


def _import_roots() -> list[str]:
    """Where later imports come from: the interpreter's prefixes and every existing sys.path entry."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    return sorted(str(Path(p).resolve()) for p in roots if p and Path(p).is_dir())


def _under(path: str, tops: tuple[str, ...]) -> bool:
    return any(path == t or path.startswith(t + "/") for t in tops)


def _world_readable(path: str) -> bool:
    p = Path(path)
    if not os.stat(p).st_mode & stat.S_IROTH:
        return False
    return all(os.stat(d).st_mode & stat.S_IXOTH for d in [p, *p.parents])
