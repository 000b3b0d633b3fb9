"""cuda_graph_prefill(compile_steps=True) on CUDA, on scripts/gpu_fast_check.py's fast_all stack, with the delta
rule recurrent or in chunks of 64 (triton_deltanet chunk_rows), or with the prefill's fronts on top (and
gqa_sdpa's maskless causal attention): inductor
compiles the prefill's backbone-layer and tower steps once for all the row buckets captured at build, the engine
passes the teacher-forced gate at drama3-mid and (slow) the full drama3 config, a prefill replays its graph
without host syncs, and the prefill wall time of 52 and 209 rows is printed beside the uncompiled fast_all's
(run with -s)."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import assert_passes_gate, assert_stack_passes_gate, config_named
from test_gpu_graph_prefill import _prefill_ms, _rows
from torch._dynamo.utils import counters

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import SamplingParams
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
FAST_ALL = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
            "cuda_graph_prefill", "graph_topk_sampling"]


ROUTED = ("triton_prefill_route", "prefill_fused_projections")


def _stack(compile_steps: bool, chunk_rows: int, extra: tuple[str, ...] = ()) -> list:
    params = {"cuda_graph_prefill": {"compile_steps": compile_steps}, "triton_deltanet": {"chunk_rows": chunk_rows}}
    names = FAST_ALL + list(extra)
    return [(TRANSFORMS[name], params.get(name, {})) for name in names]


@pytest.fixture(scope="module")
def weights():
    return init_weights(config_named("drama3-mid"), seed=0, device=torch.device("cuda"))


@pytest.fixture(scope="module")
def plain(load_package, weights):
    """fast_all as it was: the prefill graphs uncompiled, the recurrent delta rule."""
    return load_package(_stack(False, 0)).build_engine(config_named("drama3-mid"), weights, torch.device("cuda"))


@pytest.fixture(scope="module", params=[(0, ()), (64, ()), (0, ROUTED), (0, (*ROUTED, "gqa_sdpa"))],
                ids=["recurrent", "chunk64", "routed", "routed_gqa"])
def mid(request, load_package, weights):
    """(config, reference, the compiled engine, dynamo graphs its build compiled, its chunk_rows). "routed" adds
    triton_prefill_route (its routing op in every compiled layer, padding rows routed to no expert) and
    prefill_fused_projections (the frame's fused matrices in the layers' GEMMs); "routed_gqa" gqa_sdpa too (SDPA
    causal without a mask: its flash kernel instead of the float32 math path)."""
    config, device = config_named("drama3-mid"), torch.device("cuda")
    chunk_rows, extra = request.param
    counters.clear()
    eng = load_package(_stack(True, chunk_rows, extra)).build_engine(config, weights, device)
    return config, build_engine(config, weights, device), eng, counters["stats"]["unique_graphs"], chunk_rows


def test_one_compile_serves_the_prewarmed_buckets(mid):
    _, _, eng, graphs, _ = mid
    assert sorted(eng.prefill_graphs._graphs) == [64, 128, 256, 512]
    assert graphs == 3  # a DeltaNet layer, an attention layer, the tower


def test_passes_the_teacher_forced_gate(mid):
    config, ref, eng, _, _ = mid
    assert_passes_gate(config, ref, eng)


def test_prefill_replays_a_graph_without_host_syncs(mid):
    config, _, eng, _, _ = mid
    rows = _rows(config, "voice", eng)
    eng.prefill(rows, SamplingParams(), 0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        eng.prefill_graphs.run(rows)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_prefill_wall_time(mid, plain):
    config, _, eng, _, chunk_rows = mid
    for name in ("hello", "voice"):
        rows = _rows(config, name, eng)
        print(f"\n{config.name} {name} ({rows.shape[0]} rows): prefill {_prefill_ms(plain, rows):.2f} ms fast_all, "
              f"{_prefill_ms(eng, rows):.2f} ms compiled, delta rule chunk_rows {chunk_rows}")


@pytest.mark.slow
def test_full_size_engine_passes_the_teacher_forced_gate(load_package):
    """The full drama3 config (40 layers, 256 experts, ~37 GiB of random weights): what gpu_fast_check runs."""
    assert_stack_passes_gate(load_package, get_config("drama3"), _stack(True, 64))
