"""triton_moe_fused on CUDA (native FP8 conversion, bf16 activations): the two kernels equal decode_moe.moe_decode
(fp32 torch math on the same router/shared GEMV outputs) at the full model's MoE dims and are deterministic, and
the fast stack with the fused MoE passes the teacher-forced gate at drama3-tiny, drama3-mid and (slow) the full
drama3 config."""
from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch
from gpu_engines import assert_stack_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_fp8_moe import triton_fp8_moe
from knowledge_base.transforms.triton_moe_fused import triton_moe_fused
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks

pytestmark = pytest.mark.gpu
# scripts/gpu_fast_check.py's fast_all stack, then the fused MoE
FAST_ALL = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
            "cuda_graph_prefill", "graph_topk_sampling", "triton_moe_fused"]


@pytest.mark.parametrize("params", [{}, {"block_n": 2, "block_k": 512, "num_warps": 8},
                                    {"down_block_n": 8, "down_block_k": 64, "down_warps": 4}], ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernels_match_moe_decode_at_full_moe_dims(load_package, params, seed):
    graph = load_package([(cuda_graph_frame, {})])
    fused = load_package([(cuda_graph_frame, {}), (triton_fp8_moe, {}), (triton_moe_fused, params)])
    kernels = importlib.import_module(f"{fused.__name__}.fused_moe")
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    E, H, inter, block, shared = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, \
        cfg.shared_expert_intermediate_size
    gen = torch.Generator(device=dev).manual_seed(seed)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen, device=dev) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen, device=dev) / inter ** 0.5, block)
    mats = [(torch.randn(n, H, generator=gen, device=dev) / H ** 0.5).bfloat16() for n in (E, shared, shared, 1)]
    shared_down = (torch.randn(H, shared, generator=gen, device=dev) / shared ** 0.5).bfloat16()
    w = graph.decode_weights.MoEWeights(graph.decode_weights.Projection(mats, fuse=True), gate_up.view(torch.uint8),
                                        gate_up_scale, down.view(torch.uint8), down_scale, shared_down)
    x = torch.randn(1, H, generator=gen, device=dev).bfloat16()
    # both paths start from the same bf16 GEMV outputs; distinct router logits (exact in bf16: no top-k ties)
    logits = ((torch.randperm(E, generator=gen, device=dev) - E // 2) / 32).bfloat16()[None]
    outs = [logits, *w.proj(x)[1:]]
    got = kernels.fused_moe_decode(x, *outs, w, cfg)
    fp32 = dataclasses.replace(w, proj=lambda _: [o.float() for o in outs], shared_down=shared_down.float())
    want = graph.decode_moe.moe_decode(x.float(), fp32, cfg)
    assert got.dtype == torch.bfloat16 and want.abs().max() > 0.1
    torch.testing.assert_close(got.float(), want, atol=1e-4, rtol=1e-2)  # bf16 rounding of the output
    assert torch.equal(kernels.fused_moe_decode(x, *outs, w, cfg), got)  # one writer per output row: deterministic


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("stack", ["minimal", "fast_all"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, stack):
    names = FAST_ALL if stack == "fast_all" else ["cuda_graph_frame", "triton_fp8_moe", "triton_moe_fused"]
    assert_stack_passes_gate(load_package, config_named(config_name), [(TRANSFORMS[name], {}) for name in names])


@pytest.mark.slow
def test_full_size_engine_passes_the_teacher_forced_gate(load_package):
    """The full drama3 config (40 layers, 256 experts, ~37 GiB of random weights): what gpu_fast_check runs."""
    assert_stack_passes_gate(load_package, get_config("drama3"), [(TRANSFORMS[name], {}) for name in FAST_ALL])
