"""triton_prefill_gemm on CPU through the Triton interpreter, run by test_triton_interpreter.py in a process started
with TRITON_INTERPRET=1: the split-K GEMM equals F.linear (fp32: the interpreter multiplies no bf16) for any row
count, row stride and number of slices, and gives the same bits run after run; the slices follow the rows; and the
compiled prefill (cuda_graph_prefill, dynamo with aot_eager) with it keeps drama3-tiny's teacher-forced logits,
each patched projection going through the op, breaking no graph. bf16 at full size on CUDA:
tests/gpu/test_gpu_triton_prefill_gemm.py."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import os

import pytest
import torch
import torch.nn.functional as F
from test_cuda_graphs import (CFG, REFERENCE, assert_applies_once_on_top_of, hello_logits_match_recording, load,
                              transformed)

from candidates.repo import engine_files
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.prefill_fused_projections import prefill_fused_projections
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_gemm import triton_prefill_gemm
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
PREFILL = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"min_rows": (32,)})
STACK = [cuda_graph_frame, triton_prefill_moe, triton_deltanet, PREFILL, prefill_fused_projections]
# drama3-tiny's 64-wide residual in 16-wide tiles: 64 programs allow 4 slices of its 64-128 inputs at 64 rows
SMALL = dataclasses.replace(triton_prefill_gemm, space=triton_prefill_gemm.space | {
    "block_m": (16,), "block_n": (16,), "block_k": (16,), "programs": (64,), "max_split": (4,)})


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        return load(transformed(engine_files(REFERENCE), [*STACK, SMALL]), tmp_path_factory.mktemp("pkg"))


def test_applies_once_on_top_of_the_fused_projections():
    assert_applies_once_on_top_of(triton_prefill_gemm, [cuda_graph_frame, prefill_fused_projections])


@pytest.mark.parametrize(("rows", "n", "k", "split", "block_m"), [
    (1, 32, 64, 1, 16), (5, 32, 64, 2, 16), (50, 64, 128, 4, 16), (64, 64, 256, 8, 32), (33, 96, 96, 3, 16),
    (20, 40, 64, 2, 16)])  # the last: 40 columns, a partial tile
def test_split_k_gemm_matches_f_linear(package, rows, n, k, split, block_m):
    gemm = importlib.import_module(f"{package.__name__}.split_k_gemm")
    gen = torch.Generator().manual_seed(rows + n + k)
    wide = torch.randn((rows, k + 16), generator=gen)  # rows at a stride wider than k
    x, w = wide[:, 8:8 + k], torch.randn((n, k), generator=gen) * k ** -0.5
    runs = [gemm.split_k_linear(x, w, split, block_m, 32, 16 if k % 32 else 32, 4, 2) for _ in range(2)]
    torch.testing.assert_close(runs[0], F.linear(x, w), atol=1e-5, rtol=1e-5)
    assert torch.equal(runs[0], runs[1])  # fixed order of the slices' sums


def test_partial_slices_are_refused(package):
    gemm = importlib.import_module(f"{package.__name__}.split_k_gemm")
    x, w = torch.randn(4, 48), torch.randn(32, 48)
    assert gemm.fits(w, 1, 16) and gemm.fits(w, 3, 16) and not gemm.fits(w, 2, 16) and not gemm.fits(w, 1, 32)
    with pytest.raises(AssertionError):
        gemm.split_k_linear(x, w, 2, 16, 32, 16, 4, 2)


def test_fewer_rows_take_more_slices(package):
    op = importlib.import_module(f"{package.__name__}.split_k_gemm_op")
    # 16-row tiles of a 64-wide output: 4 tiles a row block; 64 programs
    assert [op.slices(rows, 64, 128) for rows in (1, 64, 65, 128, 129)] == [4, 4, 2, 2, 1]
    assert op.slices(16, 64, 32) == 2  # the depth holds only two 16-wide steps
    calls = []
    original = op.split_k_linear_op
    try:
        op.split_k_linear_op = lambda x, w: calls.append((x.shape, w.shape)) or original(x, w)
        assert op.linear(torch.randn(3, 40), torch.randn(32, 40)).shape == (3, 32)  # 40 inputs: not whole steps
        assert op.linear(torch.randn(3, 64), torch.randn(40, 64)).shape == (3, 40)
    finally:
        op.split_k_linear_op = original
    assert calls == [((3, 64), (40, 64))]


def test_compiled_prefill_keeps_the_reference_logits(package):
    calls = hello_logits_match_recording(package, "split_k_gemm", "split_k_linear",
                                         lambda x, w, split, *tiles: (x.shape[0], tuple(w.shape), split))
    b, t, h = CFG.backbone, CFG.tower, CFG.hidden_size
    # the prompt's 52 rows in their 64-row bucket: every backbone mixer's out_proj; the tower's eh_proj, o_proj and
    # MLP down over the bucket's rows but the last
    want_calls = [(64, (h, b.linear_num_value_heads * b.linear_value_head_dim), 4)] * \
        (b.num_layers - b.num_layers // b.full_attention_interval) + \
        [(64, (h, b.num_attention_heads * b.head_dim), 4)] * (b.num_layers // b.full_attention_interval) + \
        [(63, (h, 2 * h), 4), (63, (h, t.num_attention_heads * t.head_dim), 4), (63, (h, t.intermediate_size), 4)] \
        * CFG.num_tower_layers
    assert calls and set(calls) == set(want_calls) and len(calls) % len(want_calls) == 0  # each prefill run
