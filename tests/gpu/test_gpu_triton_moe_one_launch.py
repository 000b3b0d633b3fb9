"""triton_moe_one_launch on CUDA: at the full model's MoE dims its one launch equals triton_moe_fused's two kernels
(same tiles) bit for bit, leaves its counters zero, and a CUDA graph of a frame's 40 launches, each layer on its
own counters, gives the same output on every replay (a down program that read h early, or a counter left non-zero,
would not); the kept engines' stack with it passes the teacher-forced gate at drama3-tiny and drama3-mid. Timing:
scripts/gpu_moe_one_launch_bench.py."""
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
        "triton_backbone_attention", "graph_topk_sampling", "triton_backbone_deltanet", "triton_moe_block"]


@pytest.mark.parametrize("params", [{}, {"block_n": 2, "block_k": 2048, "down_block_n": 8, "num_warps": 4}], ids=str)
def test_one_launch_equals_the_two_kernels_at_full_moe_dims(load_package, params, monkeypatch):
    pkg = load_package([(TRANSFORMS[n], {}) for n in KEPT] + [(TRANSFORMS["triton_moe_one_launch"], params)])
    one, fused = (importlib.import_module(f"{pkg.__name__}.{m}") for m in ("moe_one_launch", "fused_moe"))
    for name in ("BLOCK_N", "BLOCK_K", "DOWN_BLOCK_N", "DOWN_BLOCK_K"):  # the same sums in the same order
        monkeypatch.setattr(fused, name, getattr(one, name))
    for name in ("NUM_WARPS", "DOWN_WARPS"):  # a reduction's tree follows the warps
        monkeypatch.setattr(fused, name, one.NUM_WARPS)
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    E, H, inter, block, shared = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, \
        cfg.shared_expert_intermediate_size
    gen = torch.Generator(device=dev).manual_seed(0)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen, device=dev) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen, device=dev) / inter ** 0.5, block)
    mats = [(torch.randn(n, H, generator=gen, device=dev) / H ** 0.5).bfloat16() for n in (E, shared, shared, 1)]
    w = pkg.decode_weights.MoEWeights(pkg.decode_weights.Projection(mats, fuse=True), gate_up.view(torch.uint8),
                                      gate_up_scale, down.view(torch.uint8), down_scale,
                                      (torch.randn(H, shared, generator=gen, device=dev) / shared ** 0.5).bfloat16())
    layers = cfg.num_layers
    xs = (torch.randn(layers, 1, H, generator=gen, device=dev) * 3).bfloat16()
    logits, gates, ups = ((torch.randn(layers, 1, n, generator=gen, device=dev) * 2).bfloat16()
                          for n in (E, shared, shared))
    scales = torch.randn(layers, 1, 1, generator=gen, device=dev).bfloat16()
    sync = torch.zeros((layers, 2), dtype=torch.int32, device=dev)

    def frame() -> list[torch.Tensor]:
        return [one.moe_one_launch(xs[i], logits[i], gates[i], ups[i], scales[i], w, cfg, xs[i], sync[i])
                for i in range(layers)]

    want = [fused.fused_moe_decode(xs[i], logits[i], gates[i], ups[i], scales[i], w, cfg, residual=xs[i])
            for i in range(layers)]
    got = frame()
    torch.cuda.synchronize()
    assert all(torch.equal(g, e) for g, e in zip(got, want))
    assert not sync.any()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = frame()
    for _ in range(20):
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(g, e) for g, e in zip(captured, want))
    assert not sync.any()


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name):
    assert_stack_passes_gate(load_package, config_named(config_name),
                             [(TRANSFORMS[n], {}) for n in [*KEPT, "triton_moe_one_launch"]])
