"""prefix_moe_cache on CUDA at drama3-mid, on the graphed and compiled prefill with the routing kernel: prompts taken
in turn (each sharing its system turn's first rows with the one before) pass the teacher-forced gate against the
reference, and hello's prefill after the voice prompt is timed beside the same stack without the cache (printed:
run with -s; drama3-mid has 32 experts a layer, so the full model's share of experts skipped is not shown here)."""
from __future__ import annotations

import pytest
from gpu_engines import assert_passes_gate, bench_rows, mid_engines, prefill_ms_after

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route

pytestmark = pytest.mark.gpu
STACK = [(cuda_graph_frame, {}), (triton_prefill_moe, {}), (triton_deltanet, {}), (cuda_graph_prefill, {}),
         (triton_prefill_route, {})]


@pytest.fixture(scope="module")
def engines(load_package):
    return mid_engines(load_package, STACK, STACK + [(prefix_moe_cache, {})])


def test_prompts_in_turn_pass_the_gate(engines):
    config, ref, _, cached = engines
    assert_passes_gate(config, ref, cached, prompts=slice(None))


def test_hello_after_voice_prefill_time(engines):
    config, _, plain, cached = engines
    rows = bench_rows(config, plain.tokenizer, ("voice", "hello"))
    ms = prefill_ms_after({"plain": plain, "cached": cached}, [rows["voice"]], rows["hello"])
    print(f"\ndrama3-mid hello prefill after voice: {ms['plain']:.2f} ms without the cache, {ms['cached']:.2f} ms "
          "with it")
