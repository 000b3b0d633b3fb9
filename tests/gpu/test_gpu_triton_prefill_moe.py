"""triton_prefill_moe on CUDA (native FP8 conversion, bf16 tensor-core dots): the grouped kernels equal the
reference expert loop at the full model's MoE shape for prompt-sized token counts, and the transformed reference
and graph engines pass the teacher-forced gate at drama3-tiny and drama3-mid."""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from gpu_engines import assert_stack_passes_gate, config_named

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.config import get_config
from reference_runtime.fp8 import dequantize_blocks, quantize_blocks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tokens", [1, 52, 209])
@pytest.mark.parametrize("block_m", [16, 64])
def test_grouped_kernels_match_the_loop_at_full_moe_shape(load_package, tokens, block_m):
    pkg = load_package([(triton_prefill_moe, {"block_m": block_m})])
    kernels = importlib.import_module(f"{pkg.__name__}.grouped_moe")
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    E, H, inter, block, k = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, 8
    gen = torch.Generator(device=dev).manual_seed(tokens)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen, device=dev) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen, device=dev) / inter ** 0.5, block)
    x = torch.randn(tokens, H, generator=gen, device=dev).bfloat16()
    top, experts = torch.rand(tokens, E, generator=gen, device=dev).topk(k, dim=-1)
    weights = top / top.sum(-1, keepdim=True)
    got = kernels.grouped_fp8_experts(x, weights, experts, gate_up, gate_up_scale, down, down_scale, block)
    want = torch.zeros(tokens, H, device=dev)
    for e in experts.unique().tolist():  # fp32 math on the same bf16 inputs
        rows, slot = (experts == e).nonzero(as_tuple=True)
        gate, up = F.linear(x[rows].float(), dequantize_blocks(gate_up[e], gate_up_scale[e], block)).chunk(2, -1)
        h = (F.silu(gate) * up).bfloat16().float()  # the kernel keeps the intermediate in the activation dtype
        y = F.linear(h, dequantize_blocks(down[e], down_scale[e], block))
        want.index_add_(0, rows, y * weights[rows, slot][:, None])
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("graph", [False, True], ids=["reference", "graph"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, graph):
    steps = [(cuda_graph_frame, {})] if graph else []
    assert_stack_passes_gate(load_package, config_named(config_name), steps + [(triton_prefill_moe, {})])
