"""Where a worker's engine runs: the target's generation_gpu / codec_gpu and the evaluation's device slot become
the worker's CUDA_VISIBLE_DEVICES and device names (local slots, a narrowed judge, Ray tasks), the schema refuses
impossible placements, the worker hands codec_device to build_engine only when the target sets one, and a worker
on another GPU kind than the target names is refused."""
from __future__ import annotations

import itertools
import sys

import pytest
import torch
from pydantic import ValidationError

from evaluator.channel import WorkerInit
from evaluator.devices import WorkerDevices, gpu_mismatch, worker_devices
from evaluator.sandbox import REPO_ROOT
from evaluator.worker import _build
from swarm.ray_executor import task_target
from targets.schema import HardwareSpec, load_target

ONE_GPU = HardwareSpec(device="cuda", gpu_count=4, generation_gpu=2)
TWO_STAGE = HardwareSpec(device="cuda", gpu_count=4, generation_gpu=2, codec_gpu=3)
_names = itertools.count()


def test_cpu_targets_run_on_cpu_without_touching_the_gpus():
    cpu = HardwareSpec(device="cpu")
    assert worker_devices(cpu, None, "0,1") == WorkerDevices(visible=None, device="cpu", codec_device=None)


def test_a_slot_shows_the_worker_only_its_gpus_renumbered_from_zero():
    assert worker_devices(ONE_GPU, 1, None) == WorkerDevices(visible="1", device="cuda:0", codec_device=None)
    assert worker_devices(TWO_STAGE, 2, None) == WorkerDevices(visible="2,3", device="cuda:0", codec_device="cuda:1")


def test_a_slot_counts_the_gpus_a_narrowed_judge_sees():
    assert worker_devices(TWO_STAGE, 2, "4,5,6,7").visible == "6,7"
    assert worker_devices(ONE_GPU, 0, "GPU-aa, GPU-bb").visible == "GPU-aa"
    with pytest.raises(ValueError, match="not among the judge's CUDA_VISIBLE_DEVICES"):
        worker_devices(TWO_STAGE, 0, "4,5")  # the codec GPU 3 is not visible to the judge


def test_a_slot_on_the_codec_gpu_is_refused():
    with pytest.raises(ValueError, match="codec_gpu"):
        worker_devices(TWO_STAGE, 3, None)


def test_without_a_slot_the_targets_indices_apply_to_the_judges_gpus():
    assert worker_devices(TWO_STAGE, None, "0,1,2,3") == WorkerDevices(visible=None, device="cuda:2",
                                                                       codec_device="cuda:3")


def test_a_ray_task_puts_generation_and_codec_on_its_own_two_gpus():
    """Ray narrows the task's CUDA_VISIBLE_DEVICES to the GPUs it holds (here physical 5 and 6), so the target's
    machine-wide indices 2 and 3 would name GPUs the task cannot see: the task target renumbers them."""
    target = load_target(REPO_ROOT / "targets" / "drama3_b200.yaml")
    target = target.model_copy(update={"hardware": TWO_STAGE})
    task = task_target(target)
    assert (task.hardware.gpu_count, task.hardware.generation_gpu, task.hardware.codec_gpu) == (2, 0, 1)
    assert worker_devices(task.hardware, None, "5,6") == WorkerDevices(visible=None, device="cuda:0",
                                                                       codec_device="cuda:1")
    single = task_target(target.model_copy(update={"hardware": ONE_GPU})).hardware
    assert (single.gpu_count, single.generation_gpu, single.codec_gpu) == (1, 0, None)
    cpu = load_target(REPO_ROOT / "targets" / "drama3_cpu.yaml")
    assert task_target(cpu) is cpu


@pytest.mark.parametrize(("hardware", "message"), [
    ({"device": "cpu", "gpu_count": 2, "codec_gpu": 1}, "codec_gpu needs device: cuda"),
    ({"device": "cuda", "gpu_count": 2, "codec_gpu": 0}, "must differ from generation_gpu"),
    ({"device": "cuda", "gpu_count": 2, "codec_gpu": 2}, "outside gpu_count"),
])
def test_the_schema_refuses_impossible_codec_placements(hardware, message):
    with pytest.raises(ValidationError, match=message):
        HardwareSpec(**hardware)


def test_the_shipped_targets_place_the_codec_as_documented():
    b200 = load_target(REPO_ROOT / "targets" / "drama3_b200.yaml").hardware
    assert (b200.generation_gpu, b200.codec_gpu) == (0, 1)
    assert load_target(REPO_ROOT / "targets" / "drama3_h200.yaml").hardware.codec_gpu is None
    assert "# codec_gpu: 1" in (REPO_ROOT / "targets" / "drama3_h200.yaml").read_text()


def _package(root, accepts_codec_device: bool) -> str:
    """An engine package recording the keyword arguments build_engine got; returns its import name."""
    name = f"placement_probe_{next(_names)}"
    signature, kwargs = ("config, weights, device, **kwargs", "kwargs") if accepts_codec_device else \
        ("config, weights, device", "{}")
    (root / name).mkdir()
    (root / name / "__init__.py").write_text(f"""\
from reference_runtime.model import build_engine as _reference

def build_engine({signature}):
    engine = _reference(config, weights, device, **{kwargs})
    engine.built_with = {kwargs}
    return engine
""")
    return name


def _init(package: str, codec_device: str | None) -> WorkerInit:
    return WorkerInit(role="probe", package=package, confinement=None, config="drama3-tiny", weights="random",
                      weights_seed=0, device="cpu", codec_device=codec_device)


def test_the_worker_passes_codec_device_only_when_the_target_sets_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # _build puts the package root on it
    cpu = torch.device("cpu")
    placed, _ = _build(_init(_package(tmp_path, True), "cpu"), str(tmp_path), (cpu, cpu))
    assert placed.built_with == {"codec_device": cpu} and placed.codec_stage.device == cpu
    legacy, _ = _build(_init(_package(tmp_path, False), None), str(tmp_path), (cpu,))  # predates codec_device
    assert legacy.built_with == {}


def test_a_worker_on_another_gpu_kind_than_the_targets_is_named_before_anything_is_timed():
    h200 = HardwareSpec(device="cuda", gpu="h200")
    assert gpu_mismatch(h200, "NVIDIA H200") is None
    assert gpu_mismatch(h200, "NVIDIA H200 + codec on NVIDIA H100 80GB HBM3") is None  # the generation GPU counts
    why = gpu_mismatch(h200, "NVIDIA H100 80GB HBM3")
    assert why is not None and "'h200'" in why and "NVIDIA H100 80GB HBM3" in why and "hardware.gpu" in why
    assert gpu_mismatch(HardwareSpec(device="cuda", gpu="a100"), "NVIDIA A100-SXM4-80GB") is None
    assert gpu_mismatch(HardwareSpec(device="cuda"), "NVIDIA H100 80GB HBM3") is None  # no kind named
    assert gpu_mismatch(HardwareSpec(device="cpu"), "x86_64 cpu, 2 threads") is None
