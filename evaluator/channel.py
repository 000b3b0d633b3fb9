"""Length-prefixed messages between the judge (parent) and a worker, over two pipes the parent created.

Parent -> worker: pickles (the worker trusts the parent). Worker -> parent: `torch.save` payloads that the
parent reads with `torch.load(weights_only=True)`, which builds only tensors and plain containers, so a
hostile worker cannot make the judge run code (E7); payloads are size-capped. The parent side never blocks:
every read and write polls against a deadline and calls `on_tick` (memory watch, liveness) while it waits.
"""
from __future__ import annotations

import io
import os
import pickle
import select
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .confine import Confinement

HEADER = struct.Struct("<Q")
MAX_MESSAGE_BYTES = 1 << 30
TICK_S = 0.05
# error texts meaning the CUDA context is poisoned: the worker classifies its exceptions by them, the judge its logs
CUDA_FAULT_MARKERS = ("illegal memory access", "device-side assert", "CUDA error", "misaligned address",
                      "unspecified launch failure", "CUBLAS_STATUS", "cuDNN error")
# error texts of a device allocation that failed. Their fix is to use less memory, not to repair a kernel, so they
# are checked first: cuBLAS and the CUDA runtime report them as "CUDA error: ...", which is also a fault marker.
ALLOC_FAILURE_MARKERS = ("CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "CUDA error: out of memory",
                         "CUDA out of memory")
DEVICE_OOM_FIX = ("the engine needs more device memory than is free next to the reference engine on this GPU: "
                  "keep weights quantised (no dequantised copies of the FP8 experts) and free what build_engine copies")


def cuda_failure(text: str) -> str | None:
    """The category of an error text from a CUDA call: "oom" (an allocation failed), "cuda_fault" (the context
    is poisoned) or None (neither)."""
    if any(m in text for m in ALLOC_FAILURE_MARKERS):
        return "oom"
    if any(m in text for m in CUDA_FAULT_MARKERS):
        return "cuda_fault"
    return None


@dataclass(frozen=True, slots=True)
class WorkerInit:
    """The judge's first message."""

    role: str
    package: str  # import name: "reference_runtime.model" or the neutral name of a copied candidate
    confinement: Confinement
    config: str
    weights: str  # "random" or a checkpoint directory
    weights_seed: int
    device: str
    codec_device: str | None = None  # a second device for the codec (hardware.codec_gpu)


class ChannelClosed(Exception):
    """The other end closed its pipe (the worker exited or closed the fd)."""


class ChannelTimeout(Exception):
    """The deadline passed before a whole message moved."""


class ProtocolError(Exception):
    """The worker sent bytes that are not a well-formed message."""


class WorkerChannel:
    """The worker's end: blocking, simple."""

    def __init__(self, fd_in: int, fd_out: int):
        self._in, self._out = fd_in, fd_out

    def recv(self) -> Any:
        (size,) = HEADER.unpack(self._read(HEADER.size))
        return pickle.loads(self._read(size))

    def send(self, message: dict) -> None:
        buf = io.BytesIO()
        torch.save(message, buf)
        data = HEADER.pack(buf.getbuffer().nbytes) + buf.getvalue()
        view = memoryview(data)
        while view:
            view = view[os.write(self._out, view):]

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = os.read(self._in, min(left, 1 << 20))
            if not chunk:
                raise ChannelClosed("the judge closed the channel")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


class JudgeChannel:
    """The parent's end: non-blocking fds, deadline-bounded send/recv, messages decoded safely."""

    def __init__(self, fd_read: int, fd_write: int):
        self._r, self._w = fd_read, fd_write
        os.set_blocking(fd_read, False)
        os.set_blocking(fd_write, False)
        self._buf = bytearray()

    def send(self, message: Any, deadline: float, on_tick: Callable[[], None]) -> None:
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(HEADER.pack(len(payload)) + payload)
        while view:
            if not self._wait(select.POLLOUT, self._w, deadline, on_tick):
                continue
            try:
                view = view[os.write(self._w, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError as e:
                raise ChannelClosed("the worker closed its input pipe") from e

    def recv(self, deadline: float, on_tick: Callable[[], None]) -> tuple[dict, float]:
        """The next message and `time.perf_counter()` when its last byte arrived (the judge's clock)."""
        while True:
            message = self._take()
            if message is not None:
                return message
            if self._wait(select.POLLIN, self._r, deadline, on_tick):
                try:
                    chunk = os.read(self._r, 1 << 22)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise ChannelClosed("the worker closed its output pipe")
                self._buf += chunk

    def close(self) -> None:
        """Idempotent: a second os.close of the same numbers would close whatever file another thread opened
        under them since (seen as EBADF in the judge's /proc scan while a test thread also read /proc)."""
        for fd in (self._r, self._w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._r = self._w = -1

    def _take(self) -> tuple[dict, float] | None:
        if len(self._buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buf)
        if size > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"a {size}-byte message is over the {MAX_MESSAGE_BYTES}-byte cap")
        if len(self._buf) < HEADER.size + size:
            return None
        arrived = time.perf_counter()
        body = bytes(self._buf[HEADER.size:HEADER.size + size])
        del self._buf[:HEADER.size + size]
        try:
            message = torch.load(io.BytesIO(body), weights_only=True, map_location="cpu")
        except Exception as e:  # any undecodable payload is the worker's fault, never the judge's crash
            raise ProtocolError(f"undecodable message ({type(e).__name__}: {e})") from e
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise ProtocolError(f"a message must be a dict with a 'kind'; got {type(message).__name__}")
        return message, arrived

    @staticmethod
    def _wait(event: int, fd: int, deadline: float, on_tick: Callable[[], None]) -> bool:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise ChannelTimeout("deadline passed")
        poller = select.poll()
        poller.register(fd, event | select.POLLHUP | select.POLLERR)
        ready = poller.poll(min(left, TICK_S) * 1000)
        on_tick()
        return bool(ready)


def tensor_or_none(value: object) -> torch.Tensor | None:
    """A field of a worker message that should be a dense tensor (detached, so nothing downstream trips on
    autograd); anything else (sparse, quantized, not a tensor) reads as missing."""
    if type(value) is not torch.Tensor or value.layout != torch.strided or value.is_quantized:
        return None
    return value.detach()


def describe(t: torch.Tensor | None) -> str:
    return "none" if t is None else f"{t.dtype} {tuple(t.shape)}"
