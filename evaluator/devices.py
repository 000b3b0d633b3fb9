"""Which GPUs a worker sees and where its engine runs: generation on one device, the codec optionally on a second
(`hardware.codec_gpu`).

With a device slot (`gpu_index`, from swarm.executor.device_slots or `--gpu`) the worker sees only the slot's GPU
and the codec GPU, renumbered cuda:0 and cuda:1. Indices count the GPUs the judge itself sees: positions in its
CUDA_VISIBLE_DEVICES when that is set. Without a slot the worker keeps the judge's GPUs and the target's indices
apply to them as they are (a Ray task, whose CUDA_VISIBLE_DEVICES Ray has narrowed to the task's GPUs and whose
target swarm.ray_executor renumbers to match; or the evaluator CLI without --gpu).
"""
from __future__ import annotations

from dataclasses import dataclass

from targets.schema import HardwareSpec


@dataclass(frozen=True, slots=True)
class WorkerDevices:
    visible: str | None  # the worker's CUDA_VISIBLE_DEVICES; None keeps the judge's
    device: str  # generation, as the worker names it
    codec_device: str | None  # None: the codec stays on `device`


def worker_devices(hardware: HardwareSpec, gpu_index: int | None, judge_visible: str | None) -> WorkerDevices:
    """`judge_visible`: the judge's CUDA_VISIBLE_DEVICES (None or empty: every GPU of the machine)."""
    if hardware.device == "cpu":
        return WorkerDevices(visible=None, device="cpu", codec_device=None)
    codec = hardware.codec_gpu
    if gpu_index is None:
        return WorkerDevices(visible=None, device=f"cuda:{hardware.generation_gpu}",
                             codec_device=None if codec is None else f"cuda:{codec}")
    if codec == gpu_index:
        raise ValueError(f"GPU {gpu_index} was given for generation but is the target's codec_gpu; pick another")
    gpus = [gpu_index] if codec is None else [gpu_index, codec]
    return WorkerDevices(visible=",".join(_physical(i, judge_visible) for i in gpus), device="cuda:0",
                         codec_device=None if codec is None else "cuda:1")


def _physical(index: int, judge_visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES entry of the judge's GPU `index`: a child given "2" sees the machine's GPU 2, not the
    judge's third visible one, so a narrowed judge must hand on its own entries."""
    if not judge_visible:
        return str(index)
    entries = [e.strip() for e in judge_visible.split(",")]
    if not 0 <= index < len(entries):
        raise ValueError(f"GPU index {index} is not among the judge's CUDA_VISIBLE_DEVICES={judge_visible!r}; "
                         "lower the target's GPU indices or widen CUDA_VISIBLE_DEVICES")
    return entries[index]


def gpu_mismatch(hardware: HardwareSpec, reported: str) -> str | None:
    """Why a worker's reported hardware (its generation device's name first) is not the GPU kind the target
    names, or None. Kept engines and their figures are recorded under the target's kind: an H100 timed as "h200"
    would seed later H200 runs with another GPU's baseline. Names compare without case, spaces or dashes ("h200"
    is in "NVIDIA H200")."""
    if hardware.device != "cuda" or not hardware.gpu:
        return None
    generation = reported.split(" + codec on ")[0]
    if _squeezed(hardware.gpu) in _squeezed(generation):
        return None
    return (f"the target names gpu {hardware.gpu!r} but the engines run on {generation!r}: run it on that GPU, or "
            f"set hardware.gpu to this one's kind in the target (figures are kept under that name)")


def _squeezed(name: str) -> str:
    return name.lower().replace(" ", "").replace("-", "")

