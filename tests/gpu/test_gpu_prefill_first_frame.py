"""prefill_first_frame on CUDA, on the compiled, graphed prefill with the frame pipeline: the engine passes the
teacher-forced gate at drama3-tiny and drama3-mid; its streams equal its generations frame for frame under the
default and other sampling parameters (a prefill graph per bucket and parameter set, the second captured on first
use); and the prefill (which now returns the first frame) takes less time than the pipelined engine's prefill plus
predict step, at drama3-mid (printed with -s)."""
from __future__ import annotations

import time

import pytest
import torch
from gpu_engines import SAMPLING_STACK, assert_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
STACK = SAMPLING_STACK + ["triton_tower", "triton_code_heads", "triton_frame_glue", "pipelined_frames"]


@pytest.fixture(scope="module")
def packages(load_package):
    """(the pipelined stack, the same with prefill_first_frame)."""
    return tuple(load_package([(TRANSFORMS[n], {}) for n in names])
                 for names in (STACK, STACK + ["prefill_first_frame"]))


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(packages, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device="cuda")
    assert_passes_gate(config, build_engine(config, weights, "cuda"), packages[1].build_engine(config, weights, "cuda"))


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.7, code_top_k=8, ras_top_k=8)],
                         ids=["default", "custom"])
def test_streams_are_its_generations(packages, sampling):
    config = config_named("drama3-tiny")
    engine = packages[1].build_engine(config, init_weights(config, seed=0, device="cuda"), "cuda")
    request = TTSRequest(text="Hello there", max_frames=40, ignore_eos=True, seed=5, sampling=sampling)
    want = engine.generate(request).frames
    chunks = list(engine.stream(request, StreamSchedule(first_chunk_frames=1, overlap_frames=32)))
    assert torch.equal(torch.cat([c.frames for c in chunks]), want)


def test_the_prefill_with_its_first_frame_takes_less_time(packages):
    config = config_named("drama3-mid")
    weights = init_weights(config, seed=0, device="cuda")
    request = TTSRequest(text="Hello")
    ms = {}
    for name, pkg in zip(("prefill + predict step", "first frame in the prefill"), packages):
        engine = pkg.build_engine(config, weights, "cuda")
        rows = build_rows(config, request, engine.tokenizer).to("cuda")
        times = []
        for _ in range(12):  # the first captures what the build did not
            torch.cuda.synchronize()
            start = time.perf_counter()
            engine.prefill(rows, request.sampling, 0)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        ms[name] = sorted(times[2:])[len(times[2:]) // 2]
        del engine
        torch.cuda.empty_cache()
    print(f"median prefill ms, the first frame included (drama3-mid): {ms}")
    assert ms["first frame in the prefill"] < ms["prefill + predict step"], ms
