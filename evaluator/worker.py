"""One engine in its own process: `python -m evaluator.worker --fd-in N --fd-out M` (spawned by sandbox.py).

Init message -> confine -> report confinement -> load and fingerprint the weights -> import and build the engine ->
serve requests; exceptions become typed `error` replies. The output/input guards here (E5, E16, E17) run in the
candidate's process and only catch honest mistakes: the judge's comparison with the oracle is the gate (E8).
"""
from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback
from collections.abc import Callable

import torch

from .channel import DEVICE_OOM_FIX, ChannelClosed, WorkerChannel, WorkerInit, cuda_failure
from .confine import confine
from .profile_summary import profile_summary

ENGINE_METHODS = ("prefill", "decode_frame", "decode_audio", "generate", "stream")


class Violation(Exception):
    """A harness rule broken by the engine (lazy or aliased output, mutated input)."""


def plain(t: object, what: str, inputs: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
    """A real, materialised CPU copy of an engine output (E5), refusing outputs that alias an input (E17)."""
    if type(t) is not torch.Tensor:
        raise Violation(f"{what} must be a plain torch.Tensor, got {type(t).__module__}.{type(t).__qualname__}")
    if t.device.type == "meta" or t.is_sparse:
        raise Violation(f"{what} has no real storage ({t.layout} on {t.device})")
    if t.numel():
        lo = t.untyped_storage().data_ptr()
        hi = lo + t.untyped_storage().nbytes()
        for x in inputs:
            x_lo = x.untyped_storage().data_ptr()
            if x.numel() and x.device == t.device and x_lo < hi and lo < x_lo + x.untyped_storage().nbytes():
                raise Violation(f"{what} shares storage with an input tensor")
    return t.detach().to("cpu").clone()


def guarded(inputs: tuple[torch.Tensor, ...], call: Callable[[], object]) -> object:
    """Run `call` on clones of `inputs` held here; any change to them afterwards is a violation (E16)."""
    kept = tuple(x.clone() for x in inputs)
    out = call()
    for i, (x, k) in enumerate(zip(inputs, kept)):
        if not torch.equal(x, k):
            raise Violation(f"the engine modified input tensor #{i} in place")
    return out


class Server:
    def __init__(self, engine: object, devices: tuple[torch.device, ...], channel: WorkerChannel, threads: int):
        """`threads`: torch's CPU thread count before any engine code ran (hardware.cpu_threads, or one per core)."""
        self.engine, self.channel = engine, channel
        self.device = devices[0]  # generation: the CUDA events time the stream there
        self.devices = devices
        self.threads = threads

    def serve(self) -> None:
        while True:
            try:
                request = self.channel.recv()
            except ChannelClosed:
                return
            if torch.get_num_threads() != self.threads:  # more threads is more hardware than the baseline gets
                raise Violation(f"the engine set torch's CPU threads to {torch.get_num_threads()}; the harness runs "
                                f"every engine with {self.threads} (the target's hardware.cpu_threads)")
            op = request.pop("op")
            getattr(self, f"op_{op}")(**request)

    def op_teacher_force(self, rows: torch.Tensor, frames: torch.Tensor, seed: int) -> None:
        from reference_runtime.teacher_forcing import teacher_forced

        out = guarded((rows, frames), lambda: teacher_forced(self.engine, rows, frames, seed))
        self.channel.send({"kind": "logits", "main": plain(out.main, "main logits", (rows, frames)),
                           "codes": plain(out.codes, "code logits", (rows, frames))})

    def op_decode_audio(self, codes: torch.Tensor) -> None:
        audio = guarded((codes,), lambda: self.engine.decode_audio(codes))
        self.channel.send({"kind": "audio", "audio": plain(audio, "decode_audio output", (codes,))})

    def op_generate(self, request) -> None:
        codes = tuple(r.codes for r in request.references)
        gen = guarded(codes, lambda: self.engine.generate(request))
        self.channel.send({"kind": "generation", "frames": plain(gen.frames, "Generation.frames", codes),
                           "audio": plain(gen.audio, "Generation.audio", codes)})

    def op_stream(self, request, schedule) -> None:
        """Chunks go out as they are produced, after a device sync, so the judge's clock sees real progress."""
        codes = tuple(r.codes for r in request.references)
        kept = tuple(c.clone() for c in codes)
        cuda = self.device.type == "cuda"
        start_event = torch.cuda.Event(enable_timing=True) if cuda else None
        started = time.perf_counter()
        if cuda:
            start_event.record()
        for chunk in self.engine.stream(request, schedule):
            _synchronize(self.devices)
            frames = getattr(chunk, "frames", None)
            self.channel.send({
                "kind": "chunk", "audio": plain(chunk.audio, "AudioChunk.audio", codes),
                "frame_start": int(chunk.frame_start), "frame_end": int(chunk.frame_end),
                "frames": None if frames is None else plain(frames, "AudioChunk.frames", codes),
            })
        device_s = None
        if cuda:
            end_event = torch.cuda.Event(enable_timing=True)
            _synchronize(self.devices)
            end_event.record()
            end_event.synchronize()
            device_s = start_event.elapsed_time(end_event) / 1e3
        worker_s = time.perf_counter() - started
        if not all(torch.equal(c, k) for c, k in zip(codes, kept)):
            raise Violation("the engine modified the request's reference codes in place")
        # the engine process's own peak (weights included): reported for the record, never used to decide
        peak = max((torch.cuda.max_memory_allocated(d) for d in self.devices if d.type == "cuda"), default=None)
        self.channel.send({"kind": "done", "worker_s": worker_s, "device_s": device_s,
                           "peak_gib": None if peak is None else peak / 2**30})


    def op_profile(self, request, schedule) -> None:
        """One streamed request under torch.profiler, its chunks kept here: where the engine's time goes, for the
        agents (the judge validates it and decides nothing on it). CUDA engines: kernels by self device time, the
        host side being mostly waiting; CPU engines: ops by self CPU time."""
        from torch.profiler import ProfilerActivity, profile

        cuda = self.device.type == "cuda"
        frames = 0
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            for chunk in self.engine.stream(request, schedule):
                frames = int(chunk.frame_end)
            _synchronize(self.devices)
        if frames < 1:
            raise ValueError("the profiled stream produced no frames")
        # the raw events: key_averages() would first build an object per event, 10x the stream on a CPU engine
        summary = profile_summary(prof.profiler.kineto_results.events(), cuda, frames)
        self.channel.send({"kind": "profile", "profile": summary})


def _synchronize(devices: tuple[torch.device, ...]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def _build(init: WorkerInit, package_root: str | None, devices: tuple[torch.device, ...]) -> tuple[object, str]:
    """The engine, and the fingerprint of the weights taken before any engine code was imported."""
    from reference_runtime.checkpoint import model_weights
    from reference_runtime.weights import weights_fingerprint

    device = devices[0]
    config, weights = model_weights(init.config, init.weights, init.weights_seed, device)
    fingerprint = weights_fingerprint(weights)
    if package_root is not None:
        sys.path.insert(0, package_root)
    module = importlib.import_module(init.package)
    build = getattr(module, "build_engine", None)
    if not callable(build):
        raise AttributeError(f"{init.package} has no callable build_engine(config, weights, device)")
    # codec_device only when the target places the codec apart, so engines predating it build as before
    placement = {} if init.codec_device is None else {"codec_device": devices[1]}
    engine = build(config, weights, device, **placement)
    missing = [m for m in ENGINE_METHODS if not callable(getattr(engine, m, None))]
    missing += [a for a in ("config", "device") if not hasattr(engine, a)]
    if missing:
        raise AttributeError(f"build_engine returned a {type(engine).__name__} without {', '.join(missing)} "
                             "(see reference_runtime/api.py Engine)")
    _synchronize(devices)
    return engine, fingerprint


def _error_reply(e: BaseException) -> dict:
    traceback.print_exc()  # into the log, whose tail the verdict carries
    text = f"{type(e).__name__}: {e}"
    message = text[:2000]
    failure = cuda_failure(text)
    if isinstance(e, MemoryError):
        category = "oom"
    elif isinstance(e, Violation):
        category = "violation"
    elif failure == "oom" or type(e).__name__ == "OutOfMemoryError":
        category, message = "oom", f"{message}; {DEVICE_OOM_FIX}"
    else:
        category = failure or "exception"
    return {"kind": "error", "category": category, "message": message}


def _hardware(devices: tuple[torch.device, ...]) -> str:
    threads = torch.get_num_threads()
    cpu = f"{platform.processor() or platform.machine()} cpu, {threads} thread{'s' * (threads != 1)}"
    names = [torch.cuda.get_device_name(d) if d.type == "cuda" else cpu for d in devices]
    return names[0] + "".join(f" + codec on {n}" for n in names[1:])


def _software() -> str:
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ""
    triton = sys.modules.get("triton")
    return f"python {platform.python_version()}, torch {torch.__version__}{cuda}" + \
        (f", triton {triton.__version__}" if triton else "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd-in", type=int, required=True)
    parser.add_argument("--fd-out", type=int, required=True)
    args = parser.parse_args()
    channel = WorkerChannel(args.fd_in, args.fd_out)
    init: WorkerInit = channel.recv()
    confined = confine(init.confinement)
    channel.send({"kind": "confined", "notes": confined.notes})  # before any engine code can interfere
    device = torch.device(init.device)
    devices = (device,) if init.codec_device is None else (device, torch.device(init.codec_device))
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if missing := [d for d in devices if (d.index or 0) >= count]:
            sys.exit(f"no CUDA device {missing[0]} here: this machine's torch {torch.__version__} sees {count}")
        torch.cuda.set_device(device)
    started, threads = time.perf_counter(), torch.get_num_threads()
    try:
        engine, fingerprint = _build(init, confined.package_root, devices)
    except Exception as e:
        channel.send(_error_reply(e))
        return
    channel.send({"kind": "ready", "fingerprint": fingerprint, "build_s": time.perf_counter() - started,
                  "hardware": _hardware(devices), "software": _software()})
    server = Server(engine, devices, channel, threads)
    try:
        server.serve()
    except Exception as e:
        channel.send(_error_reply(e))


if __name__ == "__main__":
    main()
