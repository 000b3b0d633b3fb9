"""prefill_state_zero on CUDA at drama3-mid, on the graphed prefill with the routing kernel: the benchmark's prompts
taken in turn twice (each prefill after another prompt's, whose states it must not see) pass the teacher-forced gate
against the reference, and the hello prompt's prefill is timed beside the stack without it (printed: run with -s;
drama3-mid has 6 DeltaNet layers, the full model 30)."""
from __future__ import annotations

import pytest
from gpu_engines import assert_passes_gate, bench_rows, mid_engines, prefill_ms_after
from test_gpu_prefix_moe_cache import STACK

from knowledge_base.transforms.prefill_state_zero import prefill_state_zero

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engines(load_package):
    return mid_engines(load_package, STACK, STACK + [(prefill_state_zero, {})])


def test_prompts_in_turn_twice_pass_the_gate(engines):
    config, ref, _, zeroed = engines
    for _ in range(2):
        assert_passes_gate(config, ref, zeroed, prompts=slice(None))


def test_hello_prefill_time(engines):
    config, _, plain, zeroed = engines
    rows = bench_rows(config, plain.tokenizer, ("voice", "hello"))
    ms = prefill_ms_after({"host resets": plain, "graph zeroes": zeroed}, [rows["voice"]], rows["hello"])
    print(f"\ndrama3-mid hello prefill after voice: {ms['host resets']:.2f} ms with the host's resets, "
          f"{ms['graph zeroes']:.2f} ms zeroed in the graph")
