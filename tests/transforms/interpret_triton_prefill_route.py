"""triton_prefill_route on CPU through the Triton interpreter, run by test_triton_interpreter.py in a process
started with TRITON_INTERPRET=1: the routing kernel picks experts of the probabilities torch's softmax and topk
pick, with their renormalised weights and counts, at tiny and full routing sizes; exact ties go to the lower
expert id; rows past a valid count go to no expert; it brings an older grouped MoE to today's; and the transformed
engine's teacher-forced logits and expert counts match the reference on drama3-tiny. The compiled prefill with it
(padding rows routed nowhere): interpret_compiled_prefill.py."""
from __future__ import annotations

import importlib
import os

import pytest
import torch
from interpret_triton_prefill_moe import assert_engine_matches_reference
from test_cuda_graphs import REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    files = transformed(engine_files(REFERENCE), [triton_prefill_moe, triton_prefill_route])
    return load(files, tmp_path_factory.mktemp("pkg"))


def test_needs_the_grouped_prefill_moe_and_brings_it_to_today():
    assert triton_prefill_route.requires == ("triton_prefill_moe",)
    params = next(triton_prefill_route.variants())
    with pytest.raises(NotApplicable):
        triton_prefill_route.apply(engine_files(REFERENCE), params)
    files = transformed(engine_files(REFERENCE), [triton_prefill_moe])
    triton_prefill_route.apply(files, params)
    assert "grouped_moe.py" not in {p.path for p in triton_prefill_route.apply(files, params)}
    # an engine kept before the grouped MoE took id -1 (a padding row's) gets today's file along
    older = files | {"grouped_moe.py": files["grouped_moe.py"].replace("expert >= 0", "expert > -1")}
    renewed = [p for p in triton_prefill_route.apply(older, params) if p.path == "grouped_moe.py"]
    assert [p.replace for p in renewed] == [files["grouped_moe.py"]]


@pytest.mark.parametrize(("tokens", "num_experts", "k"), [(1, 8, 2), (7, 8, 2), (300, 256, 8), (5, 6, 3)])
def test_picks_torch_softmax_topk(pkg, tokens, num_experts, k):
    route = importlib.import_module(f"{pkg.__name__}.prefill_route")
    gen = torch.Generator().manual_seed(tokens)
    wide = (torch.randn(tokens, num_experts + 5, generator=gen) * 3).to(torch.bfloat16)
    logits = wide[:, :num_experts]  # the router's columns of the front GEMM: strided rows
    counts = torch.arange(num_experts)  # counts add to what is there
    weights, experts = route.prefill_route(logits, k, counts, None)
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(k, dim=-1).values
    # bf16 logits tie often at 256 experts, and torch's topk orders ties as it likes: the picks are k distinct
    # experts holding the k largest probabilities, in descending order
    assert torch.equal(probs.gather(1, experts), top)
    assert all(len(set(row)) == k for row in experts.tolist())
    torch.testing.assert_close(weights, top / top.sum(-1, keepdim=True), atol=1e-6, rtol=1e-6)
    assert torch.equal(counts, torch.arange(num_experts) + torch.bincount(experts.flatten(), minlength=num_experts))


def test_exact_ties_pick_the_lower_expert(pkg):
    route = importlib.import_module(f"{pkg.__name__}.prefill_route")
    logits = torch.tensor([[0.0, 2.0, 1.0, 2.0, 1.0, 0.0, 0.0, 0.0]])
    weights, experts = route.prefill_route(logits, 3, torch.zeros(8, dtype=torch.long), None)
    assert experts.tolist() == [[1, 3, 2]]
    torch.testing.assert_close(weights.sum(-1), torch.ones(1))


def test_rows_past_the_valid_count_go_to_no_expert(pkg):
    route = importlib.import_module(f"{pkg.__name__}.prefill_route")
    logits = torch.randn(10, 8, generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(8, dtype=torch.long)
    weights, experts = route.prefill_route(logits, 2, counts, torch.tensor([7]))
    want_weights, want_experts = route.prefill_route(logits[:7], 2, torch.zeros(8, dtype=torch.long), None)
    assert torch.equal(experts[:7], want_experts) and torch.equal(weights[:7], want_weights)
    assert (experts[7:] == -1).all() and not weights[7:].any()
    assert torch.equal(counts, torch.bincount(want_experts.flatten(), minlength=8))


def test_engine_teacher_forced_logits_match_reference(pkg):
    assert_engine_matches_reference(pkg)
