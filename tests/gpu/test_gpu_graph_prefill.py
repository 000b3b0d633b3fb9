"""cuda_graph_prefill (compile_steps=False; compiled: test_gpu_compiled_prefill.py) on CUDA, on top of the stack it
needs (cuda_graph_frame, triton_prefill_moe, triton_deltanet), at drama3-tiny and drama3-mid: the teacher-forced
gate against the reference on the benchmark prompts (52, 135 and 209 rows: buckets 64 and 256), a prefill that
replays its captured graph without host syncs, and the prefill wall time of 52 and 209 rows beside the same
stack's eager prefill (printed: run with -s)."""
from __future__ import annotations

import statistics
import time

import pytest
import torch
from gpu_engines import config_named, tolerances

from evaluator.compare import Logits, check_logits
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.api import SamplingParams
from reference_runtime.bench import bench_requests
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
STACK = [(cuda_graph_frame, {}), (triton_prefill_moe, {}), (triton_deltanet, {})]
FRAMES = 16


@pytest.fixture(scope="module", params=["drama3-tiny", "drama3-mid"])
def case(request, load_package):
    """(config, reference, the stack with its eager prefill, the stack with cuda_graph_prefill)."""
    config, device = config_named(request.param), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    eager = load_package(STACK).build_engine(config, weights, device)
    graphed = load_package(STACK + [(cuda_graph_prefill, {"compile_steps": False})]).build_engine(config, weights,
                                                                                                 device)
    return config, build_engine(config, weights, device), eager, graphed


def _rows(config, name: str, engine) -> torch.Tensor:
    return build_rows(config, bench_requests(config, 1)[name], engine.tokenizer).cuda()


def test_teacher_forced_logits_pass_the_gate(case):
    config, ref, _, eng = case
    for name, request in bench_requests(config, FRAMES).items():
        frames = ref.generate(request).frames
        rows = build_rows(config, request, ref.tokenizer)
        want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
        stats, evidence = check_logits(config, name, Logits(*want), Logits(*got), frames, request.sampling,
                                       tolerances(config))
        assert not evidence, f"{config.name} {name}: {stats} {evidence}"


def test_prefill_replays_a_graph_without_host_syncs(case):
    config, _, _, eng = case
    rows = _rows(config, "voice", eng)
    graphs = eng.prefill_graphs
    assert graphs.bucket(rows.shape[0]) in graphs._graphs  # captured at build (PREWARM_PREFILL_ROWS)
    eng.prefill(rows, SamplingParams(), 0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        graphs.run(rows)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _prefill_ms(engine, rows: torch.Tensor, repeats: int = 5) -> float:
    engine.prefill(rows, SamplingParams(), 0)  # warm (lazy setup)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        engine.prefill(rows, SamplingParams(), 0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def test_prefill_wall_time(case):
    """Whole engine.prefill calls (input checks, state reset, the model work, the first frame's predict graph)."""
    config, _, eager, eng = case
    for name in ("hello", "voice"):
        rows = _rows(config, name, eng)
        print(f"\n{config.name} {name} ({rows.shape[0]} rows): prefill {_prefill_ms(eager, rows):.2f} ms eager, "
              f"{_prefill_ms(eng, rows):.2f} ms graphed (bucket {eng.prefill_graphs.bucket(rows.shape[0])})")
