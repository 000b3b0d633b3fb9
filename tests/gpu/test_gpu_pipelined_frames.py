"""pipelined_frames on CUDA: engines with it pass the teacher-forced gate at drama3-tiny and drama3-mid; a long
seeded generation equals the one-frame engine's frame for frame, through span buckets captured mid-request (each
capture's warm-up must leave the buffers a step hands to the next as they were); and a decoded frame, as a stream
of graph replays, takes less time than the one-frame engine's."""
from __future__ import annotations

import time

import pytest
import torch
from gpu_engines import SAMPLING_STACK, assert_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
STACK = SAMPLING_STACK + ["triton_tower", "triton_code_heads", "triton_frame_glue"]
NO_PREWARM = {"prewarm_rows": 0}  # every span bucket captured when a request first reaches it


@pytest.fixture(scope="module")
def packages(load_package):
    """(the one-frame stack, the same with pipelined_frames), spans captured on demand."""
    def steps(names):
        return [(TRANSFORMS[n], NO_PREWARM if n == "cuda_graph_frame" else {}) for n in names]
    return load_package(steps(STACK)), load_package(steps(STACK + ["pipelined_frames"]))


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(packages, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device="cuda")
    assert_passes_gate(config, build_engine(config, weights, "cuda"), packages[1].build_engine(config, weights, "cuda"))


def test_a_long_generation_is_the_one_frame_engines(packages):
    """~60 prompt rows and 600 frames: spans 256, 512 and 1024 captured mid-request."""
    config = get_config("drama3-tiny")
    weights = init_weights(config, seed=0, device="cuda")
    request = TTSRequest(text="Hello there, a longer request.", max_frames=600, ignore_eos=True, seed=5,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8))  # tiny heads are 64 wide
    plain, piped = (p.build_engine(config, weights, "cuda") for p in packages)
    assert torch.equal(piped.generate(request).frames, plain.generate(request).frames)


def test_a_decoded_frame_takes_less_time(packages):
    config = config_named("drama3-mid")
    weights = init_weights(config, seed=0, device="cuda")
    request = TTSRequest(text="Hello")
    ms = {}
    for name, pkg in zip(("one frame", "pipelined"), packages):
        engine = pkg.build_engine(config, weights, "cuda")
        rows = build_rows(config, request, engine.tokenizer).to("cuda")
        for _ in range(2):  # the first pass captures the graphs
            engine.prefill(rows, request.sampling, 0)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(100):
                engine.decode_frame()
            torch.cuda.synchronize()
            ms[name] = (time.perf_counter() - start) * 10
    print(f"ms per decoded frame (drama3-mid): {ms}")
    assert ms["pipelined"] < ms["one frame"], ms
