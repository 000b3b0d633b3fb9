"""triton_prefill_moe on CPU through the Triton interpreter, run by test_cuda_triton_moe.py in a process started
with TRITON_INTERPRET=1: the grouped kernels equal the reference MoE's expert loop (skewed and spread routing,
1 to 300 tokens, a block size the pairs do not fill), and the transformed reference engine's teacher-forced logits
match the reference on drama3-tiny. The native FP8 path runs in tests/gpu/."""
from __future__ import annotations

import importlib
import os

import pytest
import torch
from test_cuda_graphs import REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.moe import fp8_dequant_at_build
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.fp8 import dequantize_blocks, quantize_blocks
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_cuda_triton_moe.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return load(transformed(engine_files(REFERENCE), [triton_prefill_moe]), tmp_path_factory.mktemp("pkg"))


def _loop(x, weights, experts, gate_up, gate_up_scale, down, down_scale, block):
    """The reference's routed-expert loop, in fp32."""
    out = torch.zeros(x.shape)
    for e in experts[experts >= 0].unique().tolist():  # -1: routed to no expert
        rows, slot = (experts == e).nonzero(as_tuple=True)
        gate, up = (x[rows] @ dequantize_blocks(gate_up[e], gate_up_scale[e], block).T).chunk(2, dim=-1)
        out.index_add_(0, rows, (torch.nn.functional.silu(gate) * up) @ dequantize_blocks(down[e], down_scale[e],
                                                                                          block).T
                       * weights[rows, slot][:, None])
    return out


def test_applies_to_the_reference_with_or_without_other_moe_transforms():
    assert triton_prefill_moe.requires == () and triton_prefill_moe.devices == frozenset({"cuda"})
    for base in ([], [fp8_dequant_at_build], [cuda_graph_frame]):
        files = transformed(engine_files(REFERENCE), base)
        for params in triton_prefill_moe.variants():
            triton_prefill_moe.apply(files, params)


@pytest.mark.parametrize(("tokens", "skew", "unrouted"), [(1, False, 0), (7, True, 0), (40, False, 0), (300, True, 0),
                                                     (40, False, 9)])
def test_grouped_kernels_match_the_expert_loop(pkg, tokens, skew, unrouted):
    """`unrouted`: that many last tokens routed to no expert (-1), as a prefill's padding rows are: zeros."""
    kernels = importlib.import_module(f"{pkg.__name__}.grouped_moe")
    E, H, inter, block, k = 8, 64, 32, 16, 2
    gen = torch.Generator().manual_seed(tokens)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen) / inter ** 0.5, block)
    x = torch.randn(tokens, H, generator=gen)
    scores = torch.rand(tokens, E, generator=gen) + (torch.arange(E) == 3) * 10 * skew  # skew: expert 3 in all
    top, experts = scores.topk(k, dim=-1)
    weights = top / top.sum(-1, keepdim=True)
    experts[tokens - unrouted:] = -1
    got = kernels.grouped_fp8_experts(x, weights, experts, gate_up, gate_up_scale, down, down_scale, block)
    want = _loop(x, weights, experts, gate_up, gate_up_scale, down, down_scale, block)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not got[tokens - unrouted:].any()


def _check_layout(experts, num_experts, bm, slot_pairs, block_experts):
    """Every routed pair in exactly one slot (-1, routed to no expert: in none); each block holds one expert's pairs;
    each used expert's pairs fill ceil(count / bm) consecutive blocks, the runs in expert order, and the unused
    blocks come last."""
    flat = experts.flatten()
    assert block_experts.numel() == -(-flat.numel() // bm) + min(num_experts, flat.numel())
    assert slot_pairs.numel() == bm * block_experts.numel()
    for b, e in enumerate(block_experts.tolist()):
        pairs = [p for p in slot_pairs[bm * b:bm * (b + 1)].tolist() if p >= 0]
        assert (e < 0) == (not pairs) and all(flat[p] == e for p in pairs)
    assert sorted(p for p in slot_pairs.tolist() if p >= 0) == (flat >= 0).nonzero().flatten().tolist()
    counts = torch.bincount(flat[flat >= 0], minlength=num_experts)
    runs = [e for e in range(num_experts) for _ in range(-(-int(counts[e]) // bm))]
    assert block_experts.tolist() == runs + [-1] * (block_experts.numel() - len(runs))


def test_blocks_hold_one_expert_each(pkg):
    kernels = importlib.import_module(f"{pkg.__name__}.grouped_moe")
    experts = torch.tensor([[3, 1], [3, 0], [3, 1], [2, 3]])
    _check_layout(experts, 8, 2, *kernels._blocks(experts, 8, 2))
    experts[2:] = -1  # padding rows, routed to no expert
    _check_layout(experts, 8, 2, *kernels._blocks(experts, 8, 2))


@pytest.mark.parametrize(("tokens", "num_experts", "bm"), [(1, 256, 16), (300, 256, 16), (130, 6, 4)])
def test_blocks_of_many_pairs_and_experts(pkg, tokens, num_experts, bm):
    """Full-size routing (top-8 of 256: 2400 pairs, past one chunk of the layout kernel), and an expert count
    that is not a power of two."""
    kernels = importlib.import_module(f"{pkg.__name__}.grouped_moe")
    gen = torch.Generator().manual_seed(tokens)
    experts = torch.rand(tokens, num_experts, generator=gen).topk(min(8, num_experts - 1), dim=-1).indices
    _check_layout(experts, num_experts, bm, *kernels._blocks(experts, num_experts, bm))


def test_engine_teacher_forced_logits_match_reference(pkg):
    assert_engine_matches_reference(pkg)


def assert_engine_matches_reference(pkg) -> None:
    """`pkg`'s engine, teacher-forced on drama3-tiny, gives the reference's logits and counts the same expert picks
    (the prefill MoE transforms move the count into their own kernels)."""
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), pkg.build_engine(CFG, weights, "cpu")
    request = TTSRequest(text="Hello there", max_frames=3, ignore_eos=True, seed=1)
    frames = ref.generate(request).frames
    rows = build_rows(CFG, request, ref.tokenizer)
    before = ref.model.backbone.expert_counts()
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes, want.codes, atol=1e-4, rtol=1e-4)
    assert torch.equal(eng.model.backbone.expert_counts(), ref.model.backbone.expert_counts() - before)
