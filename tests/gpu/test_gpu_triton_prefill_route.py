"""triton_prefill_route on CUDA: at the full model's routing shape (256 experts, top-8, bf16 logits of a
prompt's rows) the kernel picks experts of the probabilities torch's softmax and topk pick, with their weights and
counts; and the transformed reference and graph engines pass the teacher-forced gate at drama3-tiny and
drama3-mid."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_stack_passes_gate, config_named

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route
from reference_runtime.config import get_config

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tokens", [1, 52, 209, 2048])
def test_route_picks_the_top_probabilities_at_full_routing_shape(load_package, tokens):
    pkg = load_package([(triton_prefill_moe, {}), (triton_prefill_route, {})])
    route = importlib.import_module(f"{pkg.__name__}.prefill_route")
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(tokens)
    logits = (torch.randn(tokens, cfg.num_experts, generator=gen, device=dev) * 3).bfloat16()
    counts = torch.zeros(cfg.num_experts, dtype=torch.long, device=dev)
    weights, experts = route.prefill_route(logits, cfg.num_experts_per_tok, counts, None)
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(cfg.num_experts_per_tok, dim=-1).values
    torch.testing.assert_close(probs.gather(1, experts), top, atol=0, rtol=2e-6)  # ties: any of the equal ones
    assert (experts.sort(dim=-1).values.diff(dim=-1) > 0).all()  # k distinct experts per token
    torch.testing.assert_close(weights, top / top.sum(-1, keepdim=True), atol=1e-6, rtol=1e-5)
    assert torch.equal(counts, torch.bincount(experts.flatten(), minlength=cfg.num_experts))


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("graph", [False, True], ids=["reference", "graph"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, graph):
    steps = [(cuda_graph_frame, {})] if graph else []
    assert_stack_passes_gate(load_package, config_named(config_name),
                             steps + [(triton_prefill_moe, {}), (triton_prefill_route, {})])
