"""triton_frame_glue on CUDA: engines with it pass the teacher-forced gate at drama3-tiny and drama3-mid, generate
what the engine without it generates (the same draws, the same RAS window), and a graphed predict step takes less
time with it."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import SAMPLING_STACK, assert_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
STACK = SAMPLING_STACK + ["triton_tower", "triton_code_heads"]


@pytest.fixture(scope="module")
def packages(load_package):
    """(the stack with the code heads, and with the glue too)."""
    return (load_package([(TRANSFORMS[name], {}) for name in STACK]),
            load_package([(TRANSFORMS[name], {}) for name in STACK + ["triton_frame_glue"]]))


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(packages, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device="cuda")
    assert_passes_gate(config, build_engine(config, weights, "cuda"), packages[1].build_engine(config, weights, "cuda"))


def test_seeded_generation_is_the_engines_without_it(packages):
    config = get_config("drama3-tiny")
    weights = init_weights(config, seed=0, device="cuda")
    request = TTSRequest(text="Hello there", max_frames=32, ignore_eos=True, seed=5,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8, ras_window=4))  # tiny heads: 64 wide
    plain, glued = (p.build_engine(config, weights, "cuda") for p in packages)
    assert torch.equal(glued.generate(request).frames, plain.generate(request).frames)


def test_a_graphed_predict_step_takes_less_time(packages):
    config = config_named("drama3-mid")
    weights = init_weights(config, seed=0, device="cuda")
    times = {}
    for name, pkg in zip(("code_heads", "code_heads+glue"), packages):
        engine = pkg.build_engine(config, weights, "cuda")
        request = TTSRequest(text="Hello")
        engine.prefill(build_rows(config, request, engine.tokenizer).to("cuda"), request.sampling, 0)
        span, sampling = engine._span(engine._rows + 1), SamplingParams()
        with torch.inference_mode():
            times[name] = graph_ms(lambda p=engine.program: p.predict(span, sampling))
    print(f"graphed predict step (ms): {times}")
    assert times["code_heads+glue"] < times["code_heads"], times
