"""Every way a candidate can fail gives a typed verdict, and the caller survives: crash, import error, hang,
sys.exit, segfault, host OOM (RSS watch and MemoryError), device allocation failures, CUDA fault text. A machine
that cannot start the reference's engine either is a harness error, not a candidate's crash."""
from __future__ import annotations

import time

import pytest
import torch

from evaluator import EvaluatorError, Status, evaluate
from evaluator.channel import ALLOC_FAILURE_MARKERS, cuda_failure
from evaluator.sandbox import REFERENCE_DIR
from tests.evaluator.candidate_factory import build_engine_body, make_candidate, small_target

CASES = {
    "raise": (build_engine_body('raise RuntimeError("boom from build_engine")'), Status.BUILD_ERROR, "boom"),
    "import_error": ({"__init__.py": "import no_such_module_h3a\n"}, Status.BUILD_ERROR, "no_such_module_h3a"),
    "no_build_engine": ({"__init__.py": "VALUE = 1\n"}, Status.BUILD_ERROR, "build_engine"),
    "sys_exit": (build_engine_body("import sys\nsys.exit(3)"), Status.CRASH, "exited with code 3"),
    "segfault": (build_engine_body("import ctypes\nctypes.string_at(0)"), Status.CRASH, "SIGSEGV"),
    "memory_error": (build_engine_body('raise MemoryError("simulated")'), Status.OOM, "simulated"),
    "cuda_fault": (build_engine_body('raise RuntimeError("CUDA error: an illegal memory access was encountered")'),
                   Status.CUDA_FAULT, "illegal memory access"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_becomes_a_verdict(case, tiny_target, tmp_path):
    files, status, text = CASES[case]
    candidate = make_candidate(tmp_path, files=files)
    verdict = evaluate(candidate, tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "work")
    assert verdict.status == status, verdict.summary
    assert text in verdict.summary or text in verdict.log_tail
    assert not verdict.status.is_correct and verdict.comparison is None


CUBLAS_ALLOC = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"  # seen on an H200
ALLOC_FAILURES = {  # the worker's error reply, and a worker that exits with the error only in its log
    "raised": build_engine_body(f'raise RuntimeError("{CUBLAS_ALLOC}")'),
    "logged_then_exited": build_engine_body(f'import sys\nprint("RuntimeError: {CUBLAS_ALLOC}", file=sys.stderr, '
                                            'flush=True)\nsys.exit(1)'),
}


@pytest.mark.parametrize("case", sorted(ALLOC_FAILURES))
def test_a_failed_device_allocation_is_oom_and_names_the_fix(case, tiny_target, tmp_path):
    candidate = make_candidate(tmp_path, files=ALLOC_FAILURES[case])
    verdict = evaluate(candidate, tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "work")
    assert verdict.status == Status.OOM, verdict.summary
    assert "next to the reference engine" in verdict.summary and "keep weights quantised" in verdict.summary
    assert "CUBLAS_STATUS_ALLOC_FAILED" in verdict.summary + verdict.log_tail


@pytest.mark.parametrize("marker", ALLOC_FAILURE_MARKERS)
def test_allocation_markers_win_over_cuda_fault_markers(marker):
    assert cuda_failure(f"RuntimeError: CUDA error: {marker}") == "oom"  # "CUDA error" alone is a fault
    assert cuda_failure("RuntimeError: CUDA error: an illegal memory access was encountered") == "cuda_fault"
    assert cuda_failure("ValueError: shapes do not match") is None


def test_hang_times_out_without_blocking_the_caller(tiny_target, tmp_path):
    candidate = make_candidate(tmp_path, files=build_engine_body("while True:\n    pass"))
    target = small_target(tiny_target, build_s=6)
    started = time.perf_counter()
    verdict = evaluate(candidate, target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "work")
    assert verdict.status == Status.TIMEOUT and "build time limit" in verdict.summary
    assert time.perf_counter() - started < 30


_REQUEST_START = "        rows = build_rows(self.config, request, self.tokenizer).to(self.device)\n"
SLOW_BASELINES = {  # the stage a kept baseline runs out of time in: its build, or its first timed stream
    "build_s": {"files": build_engine_body("while True:\n    pass")},
    "benchmark_s": {"edits": {"engine.py": (_REQUEST_START, "        import time\n        time.sleep(600)\n"
                                                            + _REQUEST_START)}},
}


@pytest.mark.parametrize("limit", sorted(SLOW_BASELINES))
def test_a_trusted_engine_out_of_time_names_the_limit_to_raise(limit, tiny_target, tmp_path):
    """A kept baseline is trusted: running past a stage's limit means the target's limit is too short for it (the
    eager reference at full size is slow), a harness error naming the key to raise, not a verdict on the candidate."""
    slow_baseline = make_candidate(tmp_path, name="slow", **SLOW_BASELINES[limit])
    stage = limit.removesuffix("_s")
    with pytest.raises(EvaluatorError, match=rf"baseline\b.*ran past the {stage} time limit \(6 s\); a trusted engine "
                                             rf"needs longer here: raise timeouts.{limit} in the target"):
        evaluate(REFERENCE_DIR, small_target(tiny_target, **{limit: 6}), baseline_dir=slow_baseline,
                 work_dir=tmp_path / "work")


def test_rss_over_the_memory_limit_is_oom(tiny_target, tmp_path):
    body = "import time, torch\nhog = []\nfor _ in range(48):\n    hog.append(torch.ones(2**26))\n    time.sleep(0.05)"
    candidate = make_candidate(tmp_path, files=build_engine_body(body))
    hardware = tiny_target.hardware.model_copy(update={"memory_limit_gib": 1.5})
    verdict = evaluate(candidate, tiny_target.model_copy(update={"hardware": hardware}), baseline_dir=REFERENCE_DIR,
                       work_dir=tmp_path / "work")
    assert verdict.status == Status.OOM and "memory_limit_gib" in verdict.summary


def test_missing_candidate_dir_is_a_build_error(tiny_target, tmp_path):
    verdict = evaluate(tmp_path / "nope", tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "work")
    assert verdict.status == Status.BUILD_ERROR and "no __init__.py" in verdict.summary


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_target_on_a_machine_without_one_is_a_harness_error(tiny_target, tmp_path):
    """Every candidate would crash here: recorded as crashes, their lessons would steer later runs away from them."""
    hardware = tiny_target.hardware.model_copy(update={"device": "cuda", "gpu": "h200"})
    with pytest.raises(EvaluatorError, match=r"reference engine cannot start on this machine(.|\n)*1 x h200"
                                             r"(.|\n)*no CUDA device cuda:0"):
        evaluate(make_candidate(tmp_path), tiny_target.model_copy(update={"hardware": hardware}),
                 baseline_dir=REFERENCE_DIR, work_dir=tmp_path / "work")
