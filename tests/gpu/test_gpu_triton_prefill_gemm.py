"""triton_prefill_gemm on CUDA: at the full model's out-projection shapes and the seed prompts' row buckets, in
bf16, the op gives F.linear's output to a rounding step, the same bits every run, and (inside a CUDA graph, as the
prefill replays it) takes less time than cuBLAS; and scripts/gpu_fast_check.py's compiled fast_all stack with it
passes the teacher-forced gate at drama3-mid. The tiles by shape: scripts/gpu_prefill_gemm_bench.py."""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from gpu_engines import assert_bf16_close, assert_stack_passes_gate, config_named, graphed_call_us

from knowledge_base.transforms import TRANSFORMS

pytestmark = pytest.mark.gpu
STACK = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
         "cuda_graph_prefill", "graph_topk_sampling", "prefill_fused_projections", "triton_prefill_gemm"]
SHAPES = [(2048, 4096), (2048, 6144)]  # out_proj / eh_proj / tower o_proj; the tower MLP's down


@pytest.fixture(scope="module")
def op(load_package):
    pkg = load_package([(TRANSFORMS[n], {}) for n in STACK])
    return importlib.import_module(f"{pkg.__name__}.split_k_gemm_op")


@pytest.mark.parametrize("rows", [1, 63, 64, 160, 223, 224])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_matches_f_linear_and_repeats_its_bits(op, rows, n, k):
    gen = torch.Generator(device="cuda").manual_seed(rows + k)
    x = torch.randn((rows, k), generator=gen, device="cuda").bfloat16()
    w = (torch.randn((n, k), generator=gen, device="cuda") * k ** -0.5).bfloat16()
    got = op.linear(x, w)
    assert_bf16_close(got, F.linear(x.float(), w.float()).bfloat16())
    assert torch.equal(got, op.linear(x, w))


@pytest.mark.parametrize("rows", [64, 224])
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_beats_cublas_inside_a_graph(op, rows, n, k):
    x = torch.randn((rows, k), device="cuda").bfloat16()
    w = torch.randn((n, k), device="cuda").bfloat16()
    ours, cublas = graphed_call_us(op.linear, (x, w)), graphed_call_us(F.linear, (x, w))
    assert ours < cublas, f"{rows} rows, {n}x{k}: split-K {ours:.1f} us, cuBLAS {cublas:.1f} us"


def test_compiled_fast_all_with_it_passes_the_gate_at_mid_size(load_package):
    assert_stack_passes_gate(load_package, config_named("drama3-mid"), [(TRANSFORMS[n], {}) for n in STACK])
