"""prefix_slots_in_place on the compiled prefill (run by test_triton_interpreter.py with TRITON_INTERPRET=1; dynamo
and AOT autograd with backend aot_eager, the routing kernel and grouped experts interpreted inside their custom ops):
two voices and a prompt without one, then the first voice again (its own slot reused), give the reference's
teacher-forced logits, with no graph break (the slot indices are device tensors the layer step takes like
prefix_moe_cache's prefix). prefix_moe_slots alone passed the same on CUDA under inductor
(tests/gpu/test_gpu_prefix_moe_slots.py); the eager torch path of both: test_prefix_moe_slots.py."""
from __future__ import annotations

import dataclasses
import functools
import os
import random

import pytest
import torch
from test_cuda_graphs import CFG, GREEDY, REFERENCE, load, transformed
from torch._dynamo.utils import counters

from candidates.repo import engine_files
from evaluator.inputs import random_codes
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from knowledge_base.transforms.prefix_moe_slots import prefix_moe_slots
from knowledge_base.transforms.prefix_slots_in_place import prefix_slots_in_place
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route
from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
FRAMES = 2


def _voice(seed: int) -> VoiceReference:
    return VoiceReference("Me.", random_codes(CFG, random.Random(seed), 6))


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    chunked = dataclasses.replace(triton_deltanet, space=triton_deltanet.space | {"chunk_rows": (32,)})
    compiled = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"compile_steps": (True,),
                                                                                          "min_rows": (32,)})
    files = transformed(engine_files(REFERENCE), [cuda_graph_frame, triton_prefill_moe, chunked, compiled,
                                                  triton_prefill_route, prefix_moe_cache, prefix_moe_slots,
                                                  prefix_slots_in_place])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        return load(files, tmp_path_factory.mktemp("pkg"))


def test_voices_in_turn_give_the_reference_logits(package):
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, in_place = build_engine(CFG, weights, "cpu"), package.build_engine(CFG, weights, "cpu")
    requests = [TTSRequest(text=text, references=refs, max_frames=FRAMES, ignore_eos=True, sampling=GREEDY)
                for text, refs in (("Hi there", (_voice(1),)), ("Hello", ()), ("Hi you", (_voice(2),)))]
    prompts = [(build_rows(CFG, r, ref.tokenizer), ref.generate(r).frames) for r in requests]
    wants = [teacher_forced(ref, *prompt) for prompt in prompts]
    counters.clear()
    for i in (0, 1, 2, 0):
        got = teacher_forced(in_place, *prompts[i])
        torch.testing.assert_close(got.main, wants[i].main, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.codes, wants[i].codes, atol=1e-5, rtol=1e-5)
    assert not counters["graph_break"]
