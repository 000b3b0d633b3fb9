"""triton_deltanet on CUDA: the kernel equals the reference delta_rule (outputs and final state) at the full
model's Gated DeltaNet dims for decode and prompt-sized token counts, and the transformed reference and graph
engines pass the teacher-forced gate at drama3-tiny and drama3-mid (the graph engine replays the kernel inside
its captured decode frame)."""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from gpu_engines import assert_passes_gate, config_named

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model.deltanet import delta_rule
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tokens", [1, 52, 209])
@pytest.mark.parametrize("block_v", [16, 32, 64])
def test_kernel_matches_delta_rule_at_full_dims(load_package, tokens, block_v):
    pkg = load_package([(triton_deltanet, {"block_v": block_v})])
    kernels = importlib.import_module(f"{pkg.__name__}.triton_deltanet")
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    nv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    gen = torch.Generator(device=dev).manual_seed(tokens)
    q = F.normalize(torch.randn(tokens, nv, dk, generator=gen, device=dev), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(tokens, nv, dk, generator=gen, device=dev), dim=-1)
    v = torch.randn(tokens, nv, dv, generator=gen, device=dev)
    beta = torch.rand(tokens, nv, generator=gen, device=dev)
    g = -torch.rand(tokens, nv, generator=gen, device=dev)
    state = torch.randn(nv, dk, dv, generator=gen, device=dev)
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q, k, v, beta, g, want_state)  # the reference package: its torch loop on CUDA too
    got = kernels.triton_delta_rule(q, k, v, beta, g, got_state)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("base", [[], [cuda_graph_frame]], ids=["reference", "graph"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, base):
    config, device = config_named(config_name), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    ref = build_engine(config, weights, device)
    eng = load_package([*((t, {}) for t in base), (triton_deltanet, {})]).build_engine(config, weights, device)
    assert_passes_gate(config, ref, eng)
