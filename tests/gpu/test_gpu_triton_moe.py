"""triton_fp8_moe on CUDA (native FP8 conversion): the kernels equal the torch routed experts at the full model's
MoE shape, and cuda_graph_frame + triton_fp8_moe pass the teacher-forced gate at drama3-tiny and drama3-mid."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_stack_passes_gate, config_named

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_fp8_moe import triton_fp8_moe
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("down_slots", [8, 1])
@pytest.mark.parametrize("block_n", [8, 16, 32])
def test_kernels_match_torch_at_full_moe_shape(load_package, block_n, down_slots):
    pkg = load_package([(cuda_graph_frame, {}), (triton_fp8_moe, {"block_n": block_n, "down_slots": down_slots})])
    kernels = importlib.import_module(f"{pkg.__name__}.triton_moe")
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    E, H, inter, block, k = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, 8
    gen = torch.Generator(device=dev).manual_seed(0)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen, device=dev) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen, device=dev) / inter ** 0.5, block)
    w = pkg.decode_weights.MoEWeights(None, gate_up.view(torch.uint8), gate_up_scale, down.view(torch.uint8),
                                      down_scale, None)
    x = torch.randn(1, H, generator=gen, device=dev).bfloat16()
    ids = torch.randperm(E, generator=gen, device=dev)[:k]
    top = torch.rand(k, generator=gen, device=dev)
    top /= top.sum()
    want = pkg.decode_moe.routed_experts(x.float(), top, ids, w, cfg)
    got = kernels.triton_routed_experts(x, top, ids, w, cfg)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name):
    assert_stack_passes_gate(load_package, config_named(config_name), [(cuda_graph_frame, {}), (triton_fp8_moe, {})])
