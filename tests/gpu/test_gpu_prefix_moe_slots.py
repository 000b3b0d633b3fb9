"""prefix_moe_slots on CUDA at drama3-mid, on the graphed and compiled prefill with the routing kernel: the benchmark's
prompts taken in turn twice pass the teacher-forced gate against the reference, and the voice prompt's prefill after
the sentences prompt (the evaluator's rotation) is timed beside prefix_moe_cache's single slot (printed: run with -s;
drama3-mid has 32 experts a layer, so the full model's share of experts skipped is not shown here, and 8 MoE layers,
so a fifth of the slots' copies)."""
from __future__ import annotations

import pytest
from gpu_engines import assert_passes_gate, bench_rows, mid_engines, prefill_ms_after
from test_gpu_prefix_moe_cache import STACK

from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from knowledge_base.transforms.prefix_moe_slots import prefix_moe_slots

pytestmark = pytest.mark.gpu
CACHED = STACK + [(prefix_moe_cache, {})]
SLOTS = CACHED + [(prefix_moe_slots, {})]


@pytest.fixture(scope="module")
def engines(load_package):
    return mid_engines(load_package, CACHED, SLOTS)


def test_prompts_in_turn_twice_pass_the_gate(engines):
    config, ref, _, slots = engines
    for _ in range(2):
        assert_passes_gate(config, ref, slots, prompts=slice(None))


def test_voice_after_sentences_prefill_time(engines):
    config, _, cached, slots = engines
    rows = bench_rows(config, cached.tokenizer, ("voice", "sentences"))
    ms = prefill_ms_after({"one slot": cached, "slots": slots},
                          [rows["voice"], rows["sentences"]], rows["voice"])
    print(f"\ndrama3-mid voice prefill after sentences: {ms['one slot']:.2f} ms with one slot, {ms['slots']:.2f} ms "
          "with slots")
