"""triton_moe_fused on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1: it
applies only on top of cuda_graph_frame + triton_fp8_moe and commutes with the other CUDA transforms of the
recipes in any order; its in-kernel routing picks torch.topk's experts and weights; the two kernels equal decode_moe.moe_decode
(routed and shared experts) on random weights; and the transformed engine's teacher-forced logits match the
reference on drama3-tiny. The native FP8 path at full dims runs in tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os
import random

import pytest
import torch
from test_cuda_graphs import REFERENCE, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_fp8_moe import triton_fp8_moe
from knowledge_base.transforms.triton_moe_fused import triton_moe_fused
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

triton = pytest.importorskip("triton")
tl = triton.language
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
BASE = [cuda_graph_frame, triton_fp8_moe]
# fast_all's stack (scripts/gpu_fast_check.py) plus inductor_decode_steps: what the fused MoE is stacked with
OTHERS = ["cuda_graph_codec", "triton_prefill_moe", "triton_deltanet", "cuda_graph_prefill", "graph_topk_sampling",
          "inductor_decode_steps"]
KERNELS = None  # the loaded package's fused_moe module
SMALL = {"block_n": 2, "block_k": 32, "down_block_n": 2, "down_block_k": 8, "num_warps": 2, "down_warps": 2}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(cuda_graph_frame alone: its torch moe_decode, the package with the fused MoE)."""
    global KERNELS
    root, graph = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), [cuda_graph_frame])
    fused = load(transformed(graph, [triton_fp8_moe, triton_moe_fused]), root)
    KERNELS = importlib.import_module(f"{fused.__name__}.fused_moe")
    return load(graph, root), fused


@pytest.fixture(scope="module")
def small_tiles(tmp_path_factory):
    """The kernels with tiles smaller than the test shapes: several unrolled chunks per reduction."""
    base = transformed(engine_files(REFERENCE), BASE)
    params = next(triton_moe_fused.variants()) | SMALL
    files = apply_edits(base, patch_edits(triton_moe_fused.apply(base, params)))
    return importlib.import_module(f"{load(files, tmp_path_factory.mktemp('small')).__name__}.fused_moe")


def test_applies_only_on_top_of_cuda_graph_frame_and_triton_fp8_moe():
    assert triton_moe_fused.requires == ("cuda_graph_frame", "triton_fp8_moe")
    assert triton_moe_fused.devices == frozenset({"cuda"}) and triton_moe_fused.feature == "fp8_moe"
    files = engine_files(REFERENCE)
    for lineage in ([], [cuda_graph_frame]):
        with pytest.raises(NotApplicable):
            triton_moe_fused.apply(transformed(files, lineage), next(triton_moe_fused.variants()))
    base = transformed(files, BASE)
    for params in triton_moe_fused.variants():
        triton_moe_fused.apply(base, params)
    with pytest.raises(NotApplicable):
        triton_moe_fused.apply(transformed(base, [triton_moe_fused]), next(triton_moe_fused.variants()))
    with pytest.raises(ValueError, match="power of two"):
        triton_moe_fused.apply(base, next(triton_moe_fused.variants()) | {"block_k": 768})


def _proposer_order(names: list[str], rng: random.Random) -> list[str]:
    """A random order of `names` in which each comes after its prerequisites (the proposer's only constraint)."""
    order: list[str] = []
    while len(order) < len(names):
        order.append(rng.choice([n for n in names if n not in order and set(TRANSFORMS[n].requires) <= set(order)]))
    return order


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    """Stacked with the recipes' CUDA transforms in any order the proposer could use, it applies and leaves the
    same decode MoE (routing and experts in the fused kernels); placed anywhere after its prerequisites in the
    recipes' order, it gives the very same package."""
    names = ["cuda_graph_frame", "triton_fp8_moe", *OTHERS, "triton_moe_fused"]
    rng = random.Random(0)
    moes = {transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])["decode_moe.py"]
            for _ in range(16)}
    assert len(moes) == 1
    moe = moes.pop()
    assert moe.index("return fused_moe_decode(") < moe.index("probs = torch.softmax(") and "triton_routed" not in moe
    stack = [TRANSFORMS[n] for n in names[:-1]]
    packages = [transformed(engine_files(REFERENCE), stack[:i] + [triton_moe_fused] + stack[i:])
                for i in range(2, len(stack) + 1)]
    assert all(p == packages[0] for p in packages[1:])


def _moe_weights(pkg, cfg, gen: torch.Generator, fuse: bool):
    """Random decode MoE weights of `cfg`: block-FP8 experts, router and shared expert in one GEMV or (fuse off)
    in four whose outputs are concatenated."""
    E, H, inter, block, shared = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block, \
        cfg.shared_expert_intermediate_size
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, H, generator=gen) / H ** 0.5, block)
    down, down_scale = quantize_blocks(torch.randn(E, H, inter, generator=gen) / inter ** 0.5, block)
    proj = pkg.decode_weights.Projection([torch.randn(n, H, generator=gen) / H ** 0.5 for n in (E, shared, shared, 1)],
                                         fuse)
    return pkg.decode_weights.MoEWeights(proj, gate_up.view(torch.uint8), gate_up_scale, down.view(torch.uint8),
                                         down_scale, torch.randn(H, shared, generator=gen) / shared ** 0.5)


@triton.jit
def _route_kernel(logits, ids_out, top_out, E: tl.constexpr, K: tl.constexpr):
    ids, top = KERNELS._route(logits, E, triton.next_power_of_2(E), K, triton.next_power_of_2(K))
    slots = tl.arange(0, triton.next_power_of_2(K))
    tl.store(ids_out + slots, ids, mask=slots < K)
    tl.store(top_out + slots, top, mask=slots < K)


@pytest.mark.parametrize("E, k", [(256, 8), (48, 6), (8, 2)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_routing_is_torch_topk_of_the_softmax(packages, E, k, seed):
    logits = torch.randn(E, generator=torch.Generator().manual_seed(seed)) * 4 - 3  # negative and positive
    ids, top = torch.empty(k, dtype=torch.int32), torch.empty(k)
    _route_kernel[(1,)](logits, ids, top, E, k)
    want, want_ids = torch.softmax(logits, -1).topk(k)
    assert torch.equal(ids.long(), want_ids)
    torch.testing.assert_close(top, want / want.sum(), atol=1e-6, rtol=1e-6)


# E, k, H, I, FP8 block, shared I: drama3-tiny's; drama3's routing; nothing a power of two where it may not be
SHAPES = {"tiny": (8, 2, 64, 32, 16, 32), "full_routing": (256, 8, 128, 32, 32, 32), "odd": (48, 6, 64, 32, 16, 48)}


@pytest.mark.parametrize("shape, seed, part, tiles", [
    *((shape, seed, "both", "default") for shape in SHAPES for seed in (0, 1)), ("tiny", 2, "both", "small"),
    ("odd", 2, "both", "small"), ("odd", 3, "shared_only", "default"), ("odd", 4, "routed_only", "small")])
def test_kernels_match_torch_moe_decode(packages, small_tiles, shape, seed, part, tiles):
    graph, _ = packages
    E, k, H, inter, block, shared = SHAPES[shape]
    cfg = dataclasses.replace(get_config("drama3").backbone, num_experts=E, num_experts_per_tok=k, hidden_size=H,
                              moe_intermediate_size=inter, fp8_block=block, shared_expert_intermediate_size=shared)
    gen = torch.Generator().manual_seed(seed)
    w = _moe_weights(graph, cfg, gen, fuse=seed % 2 == 0)
    if part == "shared_only":  # zero scales: the routed experts add nothing
        w = dataclasses.replace(w, down_scale=torch.zeros_like(w.down_scale))
    elif part == "routed_only":
        w = dataclasses.replace(w, shared_down=torch.zeros_like(w.shared_down))
    x = torch.randn(1, cfg.hidden_size, generator=gen)
    got = (KERNELS if tiles == "default" else small_tiles).fused_moe_decode(x, *w.proj(x), w, cfg)
    want = graph.decode_moe.moe_decode(x, w, cfg)
    assert got.dtype == x.dtype and got.shape == x.shape and want.abs().max() > 0.1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_params_module_holds_the_first_variant(packages):
    _, fused = packages
    params = importlib.import_module(f"{fused.__name__}.fused_moe_params")
    first = next(triton_moe_fused.variants())
    assert (params.BLOCK_N, params.BLOCK_K, params.DOWN_BLOCK_N, params.DOWN_BLOCK_K, params.NUM_WARPS,
            params.DOWN_WARPS) == tuple(first.values())
    assert [KERNELS._tile(n, 512) for n in (64, 96, 512, 2048, 384)] == [64, 32, 512, 512, 128]


def test_engine_teacher_forced_logits_match_reference(packages, monkeypatch):
    _, fused = packages
    original, calls = KERNELS.fused_moe_decode, []
    monkeypatch.setattr(KERNELS, "fused_moe_decode", lambda *args: calls.append(1) or original(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fused.build_engine(CFG, weights, "cpu")
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1))
    assert len(calls) == CFG.backbone.num_layers * (len(frames) - 1)  # every decode step's MoE, fused

