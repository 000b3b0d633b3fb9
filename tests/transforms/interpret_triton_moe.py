"""triton_fp8_moe on CPU through the Triton interpreter, run by test_cuda_triton_moe.py in a process started with
TRITON_INTERPRET=1 (the interpreter decodes the FP8 bytes from their bits instead of the sm_90 conversion): the
kernels equal decode_moe.routed_experts, the bit decoding equals torch's float8_e4m3fn conversion for every byte,
and the transformed engine's teacher-forced logits match the reference on drama3-tiny. The native FP8 path runs
in tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch
from test_cuda_graphs import REFERENCE, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_fp8_moe import triton_fp8_moe
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.fp8 import FP8_DTYPE, quantize_blocks
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

triton = pytest.importorskip("triton")
tl = triton.language
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_cuda_triton_moe.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
KERNELS = None  # the loaded package's triton_moe module
FP8_BITS = None  # and its fp8_bits module


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    global KERNELS, FP8_BITS
    package = load(transformed(engine_files(REFERENCE), [cuda_graph_frame, triton_fp8_moe]),
                   tmp_path_factory.mktemp("pkg"))
    KERNELS = importlib.import_module(f"{package.__name__}.triton_moe")
    FP8_BITS = importlib.import_module(f"{package.__name__}.fp8_bits")
    return package


@triton.jit
def _decode_bytes(src, dst):
    offs = tl.arange(0, 256)
    tl.store(dst + offs, FP8_BITS.fp8_e4m3(tl.load(src + offs), False))  # interpreted: plain Python lookups


def test_applies_only_on_top_of_cuda_graph_frame():
    assert triton_fp8_moe.requires == ("cuda_graph_frame",) and triton_fp8_moe.devices == frozenset({"cuda"})
    with pytest.raises(NotApplicable):
        triton_fp8_moe.apply(engine_files(REFERENCE), next(triton_fp8_moe.variants()))
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame])
    for params in triton_fp8_moe.variants():
        triton_fp8_moe.apply(graph, params)


def test_fp8_bit_decoding_matches_torch_for_every_byte(pkg):
    bits = torch.arange(256, dtype=torch.uint8)
    out = torch.empty(256)
    _decode_bytes[(1,)](bits, out)
    want = bits.view(FP8_DTYPE).float()
    finite = torch.isfinite(want)  # 0x7f / 0xff are NaN in e4m3fn and never produced by the quantiser
    assert torch.equal(out[finite], want[finite]) and finite.sum() == 254


@pytest.fixture(scope="module")
def split_down(tmp_path_factory):
    """The kernels with one expert per down-projection program (down_slots=1)."""
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame])
    patches = triton_fp8_moe.apply(graph, next(triton_fp8_moe.variants()) | {"down_slots": 1})
    files = apply_edits(graph, patch_edits(patches))
    return importlib.import_module(f"{load(files, tmp_path_factory.mktemp('split')).__name__}.triton_moe")


@pytest.mark.parametrize("split", [False, True], ids=["all_slots", "one_slot"])
@pytest.mark.parametrize("shape", [(8, 64, 32, 16, 2), (8, 256, 128, 128, 4)], ids=["tiny", "block128"])
def test_kernels_match_torch_routed_experts(pkg, split_down, shape, split):
    E, H, inter, block, k = shape
    cfg = dataclasses.replace(get_config("drama3").backbone, num_experts=E, hidden_size=H, moe_intermediate_size=inter,
                              fp8_block=block, num_experts_per_tok=k, shared_expert_intermediate_size=inter)
    gen = torch.Generator().manual_seed(0)
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen) / inter ** 0.5, block)
    w = pkg.decode_weights.MoEWeights(None, gate_up.view(torch.uint8), gate_up_scale, down.view(torch.uint8),
                                      down_scale, None)
    x = torch.randn(1, H, generator=gen)
    ids = torch.randperm(E, generator=gen)[:k]
    top = torch.rand(k, generator=gen)
    top /= top.sum()
    got = (split_down if split else KERNELS).triton_routed_experts(x, top, ids, w, cfg)
    torch.testing.assert_close(got, pkg.decode_moe.routed_experts(x, top, ids, w, cfg), atol=1e-5, rtol=1e-5)


def test_engine_teacher_forced_logits_match_reference(pkg):
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), pkg.build_engine(CFG, weights, "cpu")
    assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1))
