"""triton_moe_block on CUDA: its norm + router|shared projection kernel equals torch's RMSNorm and cuBLAS's GEMV
(bf16 rounding apart) at the full model's MoE dims, and moe_block is triton_moe_fused's kernels on those outputs
plus the residual, deterministically; the kept engines' stack with it passes the teacher-forced gate at
drama3-tiny, drama3-mid and (slow) the full drama3 config. Timing: scripts/gpu_moe_block_bench.py."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_stack_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks

pytestmark = pytest.mark.gpu
# the kept engine's lineage on the H200 (session 10, drama3-h200-lease-003.i001.s00), then the MoE block
KEPT = ["triton_prefill_moe", "cuda_graph_frame", "triton_deltanet", "triton_fp8_moe", "cuda_graph_prefill",
        "inductor_decode_steps", "cuda_graph_codec", "triton_moe_fused", "triton_tower", "triton_sampling",
        "triton_backbone_attention", "graph_topk_sampling", "triton_backbone_deltanet"]


@pytest.mark.parametrize("params", [{}, {"block_n": 8, "block_k": 512, "num_warps": 2}], ids=str)
def test_kernels_equal_norm_gemv_and_the_fused_moe_at_full_moe_dims(load_package, params):
    pkg = load_package([(TRANSFORMS[n], {}) for n in KEPT] + [(TRANSFORMS["triton_moe_block"], params)])
    block, fused = (importlib.import_module(f"{pkg.__name__}.{m}") for m in ("moe_block", "fused_moe"))
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    E, H, inter, fp8_block, shared = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, \
        cfg.shared_expert_intermediate_size
    gen = torch.Generator(device=dev).manual_seed(0)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen, device=dev) / H ** 0.5,
                                             fp8_block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen, device=dev) / inter ** 0.5, fp8_block)
    mats = [(torch.randn(n, H, generator=gen, device=dev) / H ** 0.5).bfloat16() for n in (E, shared, shared, 1)]
    w = pkg.decode_weights.MoEWeights(pkg.decode_weights.Projection(mats, fuse=True), gate_up.view(torch.uint8),
                                      gate_up_scale, down.view(torch.uint8), down_scale,
                                      (torch.randn(H, shared, generator=gen, device=dev) / shared ** 0.5).bfloat16())
    x = (torch.randn(1, H, generator=gen, device=dev) * 3).bfloat16()
    gain = 1 + 0.1 * torch.randn(H, generator=gen, device=dev)
    h = pkg.decode_ops.norm(x, gain, cfg.rms_norm_eps)
    rows = sum(w.proj.sizes)
    got_proj, got_h = torch.empty((1, rows), dtype=x.dtype, device=dev), torch.empty_like(x)
    block._norm_proj_kernel[(-(-rows // block.BLOCK_N),)](
        x, gain, w.proj.mats[0], got_proj, got_h, cfg.rms_norm_eps, H, rows, block.BLOCK_N,
        block._block(H, block.BLOCK_K), num_warps=block.NUM_WARPS)
    assert torch.equal(got_h, h)  # the same fp32 math, rounded once
    torch.testing.assert_close(got_proj.float(), torch.cat(w.proj(h), -1).float(), atol=2e-2, rtol=1e-2)
    got = block.moe_block(x, gain, w, cfg)
    want = x + fused.fused_moe_decode(h, *got_proj.split(w.proj.sizes, dim=-1), w, cfg)
    assert torch.equal(got, want)  # the down kernel's add rounds as torch's
    assert torch.equal(block.moe_block(x, gain, w, cfg), got)  # one writer per output row: deterministic


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name):
    assert_stack_passes_gate(load_package, config_named(config_name),
                             [(TRANSFORMS[n], {}) for n in [*KEPT, "triton_moe_block"]])


@pytest.mark.slow
def test_full_size_engine_passes_the_teacher_forced_gate(load_package):
    """The full drama3 config (40 layers, 256 experts, ~37 GiB of random weights)."""
    assert_stack_passes_gate(load_package, get_config("drama3"),
                             [(TRANSFORMS[n], {}) for n in [*KEPT, "triton_moe_block"]])
