"""triton_moe_block on CPU, run by test_triton_interpreter.py with TRITON_INTERPRET=1: it applies only on top of
cuda_graph_frame, triton_moe_fused (of today's version: its down kernel adds the residual) and both backbone
mixer-kernel transforms, once, and commutes with the other CUDA transforms of the recipes; its kernels equal the
torch layer's MoE half, x + moe_decode(norm(x)), with a fused and an unfused projection, at tiny, odd (no row
count a power of two) and bf16 shapes, with the default tiles and small ones; and the engine with it passes
drama3-tiny's teacher-forced logits with every layer of every decode frame through it. Compiled kernels and timing
run in tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os
import random

import pytest
import torch
from interpret_triton_moe_fused import _moe_weights, _proposer_order
from interpret_triton_tower import cuda_like_bf16  # noqa: F401 (an autouse fixture: bf16 as CUDA rounds it)
from test_cuda_graphs import REFERENCE, assert_logits_match, load, transformed, use_torch_tower_layers

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from knowledge_base.transforms.triton_moe_block import FUSED, triton_moe_block
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
PREREQUISITES = ["cuda_graph_frame", "triton_fp8_moe", "triton_moe_fused", "triton_tower", "triton_backbone_attention",
                 "triton_backbone_deltanet"]
OTHERS = ["cuda_graph_codec", "triton_prefill_moe", "triton_deltanet", "cuda_graph_prefill", "graph_topk_sampling",
          "inductor_decode_steps", "triton_sampling"]
# E, k, H, I, FP8 block, shared I (projection rows E + 2 I_s + 1: 73 and 151, neither a power of two)
SHAPES = {"tiny": (8, 2, 64, 32, 16, 32), "odd": (48, 6, 64, 32, 16, 51)}
SMALL = {"block_n": 2, "block_k": 16, "num_warps": 2}


def _stack(names: list[str]) -> dict[str, str]:
    return transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in names])


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(cuda_graph_frame alone: the torch layer, {tiles: the moe_block module with the default or small tiles})."""
    root, base = tmp_path_factory.mktemp("pkg"), _stack(PREREQUISITES)
    blocks = {}
    for tiles, overrides in (("default", {}), ("small", SMALL)):
        params = next(triton_moe_block.variants()) | overrides
        files = apply_edits(base, patch_edits(triton_moe_block.apply(base, params)))
        blocks[tiles] = importlib.import_module(f"{load(files, root).__name__}.moe_block")
    return load(_stack(["cuda_graph_frame"]), root), blocks


def test_applies_only_on_top_of_its_prerequisites_and_today_s_fused_moe():
    t = triton_moe_block
    assert t.devices == frozenset({"cuda"}) and t.lesson and t.feature == "fp8_moe"
    assert set(t.requires) <= set(PREREQUISITES)
    for missing in t.requires:
        with pytest.raises(NotApplicable):
            t.apply(_stack([n for n in PREREQUISITES if n != missing and missing not in TRANSFORMS[n].requires]),
                    next(t.variants()))
    base = _stack(PREREQUISITES)
    for params in t.variants():
        t.apply(base, params)
    with pytest.raises(NotApplicable):
        t.apply(transformed(base, [t]), next(t.variants()))
    # an engine kept before the down kernel took the residual: a renewal of triton_moe_fused must come first
    before = base | {FUSED: base[FUSED].replace("residual: torch.Tensor | None = None", "")}
    with pytest.raises(NotApplicable, match="renew triton_moe_fused"):
        t.apply(before, next(t.variants()))
    with pytest.raises(ValueError, match="power of two"):
        t.apply(base, next(t.variants()) | {"block_k": 768})


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    names = PREREQUISITES + OTHERS + ["triton_moe_block"]
    rng = random.Random(3)
    steps = {_stack(_proposer_order(names, rng))["decode_step.py"] for _ in range(12)}
    assert len(steps) == 1
    assert "x = moe_block(x, lw.post_gain, lw.moe, cfg)" in steps.pop()


@pytest.mark.parametrize("shape, dtype, fuse, tiles", [
    ("tiny", torch.float32, True, "default"), ("tiny", torch.float32, True, "small"),
    ("odd", torch.float32, True, "small"), ("odd", torch.float32, False, "default"),
    ("odd", torch.bfloat16, True, "small")])
def test_kernels_equal_the_torch_moe_half_of_a_layer(packages, shape, dtype, fuse, tiles):
    graph, blocks = packages
    E, k, H, inter, block, shared = SHAPES[shape]
    cfg = dataclasses.replace(get_config("drama3").backbone, num_experts=E, num_experts_per_tok=k, hidden_size=H,
                              moe_intermediate_size=inter, fp8_block=block, shared_expert_intermediate_size=shared)
    gen = torch.Generator().manual_seed(len(shape) + fuse)
    w = _moe_weights(graph, cfg, gen, fuse)
    if dtype == torch.bfloat16:
        mats = w.proj.mats[0].split(w.proj.sizes) if fuse else w.proj.mats
        w = dataclasses.replace(w, proj=graph.decode_weights.Projection([m.bfloat16() for m in mats], fuse),
                                shared_down=w.shared_down.bfloat16())
    x = (torch.randn(1, H, generator=gen) * 3).to(dtype)
    gain = 1 + torch.randn(H, generator=gen) * 0.1
    got = blocks[tiles].moe_block(x, gain, w, cfg)
    want = x + graph.decode_moe.moe_decode(graph.decode_ops.norm(x, gain, cfg.rms_norm_eps), w, cfg)
    assert got.dtype == x.dtype and got.shape == x.shape and (want - x).abs().max() > 0.1
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_engine_teacher_forced_logits_match_reference(tmp_path, monkeypatch):
    """Every backbone layer of every decode frame goes through moe_block. The tower runs its torch layers: its
    kernels are checked in the engine by interpret_triton_tower.py (use_torch_tower_layers)."""
    fast = load(transformed(_stack(PREREQUISITES), [triton_moe_block]), tmp_path)
    use_torch_tower_layers([fast], tmp_path, monkeypatch.setattr)
    block = importlib.import_module(f"{fast.__name__}.moe_block")
    original, calls = block.moe_block, []
    monkeypatch.setattr(block, "moe_block", lambda *args: calls.append(1) or original(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1))
    assert len(calls) == CFG.backbone.num_layers * (len(frames) - 1)
