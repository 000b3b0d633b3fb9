"""triton_deltanet_prep on CUDA: at the full model's DeltaNet dims in bf16 a layer's call through the front kernel
gives the reference layer's output, conv state and recurrent state (the reference's conv1d and token loop), also
from nonzero states and when a device row count stops the call early; and scripts/gpu_fast_check.py's compiled
fast_all stack with it passes the teacher-forced gate at drama3-mid. Its time: gpu_fast_check --kept-plus
triton_deltanet_prep (the prefill's kernel profile lists deltanet_prep's kernel)."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_bf16_close, assert_stack_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.config import get_config
from reference_runtime.model.deltanet import GatedDeltaNet
from reference_runtime.model.kv_cache import DeltaNetState

pytestmark = pytest.mark.gpu
STACK = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
         "cuda_graph_prefill", "graph_topk_sampling", "triton_deltanet_prep"]


def _weights(cfg, gen: torch.Generator) -> dict[str, torch.Tensor]:
    kd, vd, h = cfg.linear_num_key_heads * cfg.linear_key_head_dim, \
        cfg.linear_num_value_heads * cfg.linear_value_head_dim, cfg.hidden_size
    nv = cfg.linear_num_value_heads
    shapes = {"in_proj_qkvz.weight": (2 * kd + 2 * vd, h), "in_proj_ba.weight": (2 * nv, h),
              "conv1d.weight": (2 * kd + vd, 1, cfg.linear_conv_kernel), "dt_bias": (nv,), "A_log": (nv,),
              "norm.weight": (cfg.linear_value_head_dim,), "out_proj.weight": (h, vd)}
    return {f"l.{name}": (torch.randn(shape, generator=gen, device="cuda") * (0.5 if len(shape) == 1 else h ** -0.5))
            .bfloat16() for name, shape in shapes.items()}


@pytest.mark.parametrize(("tokens", "valid"), [(1, None), (52, None), (209, None), (256, 209)])
def test_layer_matches_the_reference_layer_at_full_dims(load_package, tokens, valid):
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    pkg = load_package([(TRANSFORMS[n], {}) for n in STACK])
    gen = torch.Generator(device=dev).manual_seed(tokens)
    weights = _weights(cfg, gen)
    fast = importlib.import_module(f"{pkg.__name__}.deltanet").GatedDeltaNet(weights, "l.", cfg, dev)
    ref = GatedDeltaNet(weights, "l.", cfg, dev)
    start = ref.new_state(torch.bfloat16, dev)
    start.conv.copy_(torch.randn(start.conv.shape, generator=gen, device=dev))
    start.recurrent.copy_(torch.randn(start.recurrent.shape, generator=gen, device=dev) * 0.1)
    x = torch.randn((tokens, cfg.hidden_size), generator=gen, device=dev).bfloat16()
    n = tokens if valid is None else valid
    want_state = DeltaNetState(conv=start.conv.clone(), recurrent=start.recurrent.clone())
    want = ref(x[:n], torch.arange(n, device=dev), want_state)
    state = importlib.import_module(f"{pkg.__name__}.kv_cache").DeltaNetState(
        conv=start.conv.clone(), recurrent=start.recurrent.clone(),
        valid=None if valid is None else torch.tensor([valid], device=dev))
    got = fast(x, torch.arange(tokens, device=dev), state)
    assert_bf16_close(got[:n], want)
    assert not got[n:].any()
    assert torch.equal(state.conv, want_state.conv)
    # fp32 states fed by bf16 inputs a rounding apart (the kernel's conv sums in another order than cuDNN's)
    scale = want_state.recurrent.abs().max().item()
    torch.testing.assert_close(state.recurrent, want_state.recurrent, atol=2e-2 * scale, rtol=2e-2)


def test_compiled_fast_all_with_it_passes_the_gate_at_mid_size(load_package):
    assert_stack_passes_gate(load_package, config_named("drama3-mid"), [(TRANSFORMS[n], {}) for n in STACK])
