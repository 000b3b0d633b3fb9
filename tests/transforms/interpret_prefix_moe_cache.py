"""prefix_moe_cache through the Triton path (run by test_triton_interpreter.py with TRITON_INTERPRET=1): with the
routing kernel and the grouped experts interpreted, the reused rows go to no expert (ids -1) and take their routed
output from the cache; a prompt sharing its system turn with the previous one gets the uncached stack's logits.
The torch path: test_prefix_moe_cache.py."""
from __future__ import annotations

import os

import pytest
import torch
from test_prefix_moe_cache import STACK, TEXTS, _prompt

from candidates.repo import engine_files
from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, REFERENCE, load, transformed

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"


def test_the_second_prompt_gets_the_uncached_logits(tmp_path):
    files = transformed(engine_files(REFERENCE), STACK)
    weights = init_weights(CFG, seed=0, device="cpu")
    plain, cached = (load(f, tmp_path).build_engine(CFG, weights, "cpu")
                     for f in (files, transformed(files, [prefix_moe_cache])))
    first, second = (_prompt(plain, text) for text in TEXTS)
    teacher_forced(cached, first[0], first[1][:2])
    want = teacher_forced(plain, second[0], second[1][:2])
    # twice: the second time the reused rows' outputs are those the first reuse left in the cache (rows sent to
    # no expert come out of the kernels as zeros, which must not replace them)
    for _ in range(2):
        got = teacher_forced(cached, second[0], second[1][:2])
        torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
