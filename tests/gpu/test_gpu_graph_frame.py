"""cuda_graph_frame (+ cuda_graph_codec) on CUDA at drama3-tiny and drama3-mid: teacher-forced logits pass the
evaluator's gate against the reference, decode steps replay captured graphs without host syncs, and sampled
streams are well formed and equal the non-streaming generation."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import config_named, tolerances

from evaluator.compare import Logits, check_logits, invalid_frame
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_steps import inductor_decode_steps
from reference_runtime.api import SamplingParams, StreamSchedule
from reference_runtime.bench import bench_requests
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
FRAMES = 16


@pytest.fixture(scope="module", params=["drama3-tiny", "drama3-mid"])
def case(request, load_package):
    config, device = config_named(request.param), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    pkg = load_package([(cuda_graph_frame, {}), (cuda_graph_codec, {})])
    tol = tolerances(config)
    return config, build_engine(config, weights, device), pkg.build_engine(config, weights, device), tol


def test_teacher_forced_logits_pass_the_gate(case):
    config, ref, eng, tol = case
    for name, request in list(bench_requests(config, FRAMES).items())[1:]:  # the multi-sentence and voice prompts
        frames = ref.generate(request).frames
        rows = build_rows(config, request, ref.tokenizer)
        want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
        stats, evidence = check_logits(config, name, Logits(*want), Logits(*got), frames, request.sampling, tol)
        assert not evidence, f"{config.name} {name}: {stats} {evidence}"


def test_decode_replays_graphs_without_host_syncs(case):
    config, _, eng, _ = case
    request = bench_requests(config, 4)["hello"]
    eng.prefill(build_rows(config, request, eng.tokenizer).cuda(), SamplingParams(), 0)
    eng.decode_frame()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            eng.decode_frame()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert any(kind == "frame" for kind, _, _ in eng._graphs)


def test_sampled_stream_is_well_formed_and_equals_generate(case):
    config, _, eng, tol = case
    request = bench_requests(config, 40)["hello"]
    gen = eng.generate(request)
    assert gen.frames.shape == (40, 11) and invalid_frame(config, gen.frames) is None
    chunks = list(eng.stream(request, StreamSchedule(first_chunk_frames=1)))
    assert chunks[0].frame_end == 1 and chunks[-1].frame_end == 40
    torch.testing.assert_close(torch.cat([c.audio for c in chunks]), gen.audio, atol=tol.stream_max_abs, rtol=0)


def test_compiled_steps_pass_the_gate(load_package):
    """inductor_decode_steps at drama3-mid: inductor-fused mixers, tower layers and draws inside the captured graph."""
    config, device = config_named("drama3-mid"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    ref = build_engine(config, weights, device)
    eng = load_package([(cuda_graph_frame, {}), (inductor_decode_steps, {})]).build_engine(config, weights, device)
    request = bench_requests(config, FRAMES)["voice"]
    frames = ref.generate(request).frames
    rows = build_rows(config, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    stats, evidence = check_logits(config, "voice", Logits(*want), Logits(*got), frames, request.sampling,
                                   tolerances(config))
    assert not evidence, f"{stats} {evidence}"
