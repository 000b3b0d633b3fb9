"""triton_moe_one_launch on CPU, run by test_triton_interpreter.py with TRITON_INTERPRET=1 (which runs a launch's
programs one after another in id order, as the GPU starts them): it applies only on top of triton_moe_block and
today's triton_moe_fused, and commutes with the other CUDA transforms of the recipes; its one launch equals
triton_moe_block's two fused-MoE kernels bit for bit at tiny, odd and bf16 shapes, with the default tiles and small
ones, and leaves its counters zero for the next launch; the engine with it passes drama3-tiny's teacher-forced
logits with every layer of every decode frame through it. Compiled kernels and timing run in tests/gpu/."""
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
from knowledge_base.transforms.triton_moe_one_launch import FUSED, triton_moe_one_launch
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
PREREQUISITES = ["cuda_graph_frame", "triton_fp8_moe", "triton_moe_fused", "triton_tower", "triton_backbone_attention",
                 "triton_backbone_deltanet", "triton_moe_block"]
OTHERS = ["cuda_graph_codec", "triton_prefill_moe", "triton_deltanet", "cuda_graph_prefill", "graph_topk_sampling",
          "inductor_decode_steps", "triton_sampling", "triton_code_heads", "triton_frame_glue", "pipelined_frames"]
# E, k, H, I, FP8 block, shared I (as interpret_triton_moe_block.py)
SHAPES = {"tiny": (8, 2, 64, 32, 16, 32), "odd": (48, 6, 64, 32, 16, 51)}
SMALL = {"block_n": 2, "block_k": 16, "down_block_n": 16, "down_block_k": 16, "num_warps": 1}


def _stack(names: list[str]) -> dict[str, str]:
    return transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in names])


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(cuda_graph_frame alone: its decode_weights, {tiles: the package with the one-launch MoE})."""
    root, base = tmp_path_factory.mktemp("pkg"), _stack(PREREQUISITES)
    fast = {}
    for tiles, overrides in (("default", {}), ("small", SMALL)):
        params = next(triton_moe_one_launch.variants()) | overrides
        fast[tiles] = load(apply_edits(base, patch_edits(triton_moe_one_launch.apply(base, params))), root)
    return load(_stack(["cuda_graph_frame"]), root), fast


def test_applies_only_on_top_of_the_moe_block_and_today_s_fused_moe():
    t = triton_moe_one_launch
    assert t.devices == frozenset({"cuda"}) and t.lesson and t.feature == "fp8_moe" and not t.proven
    with pytest.raises(NotApplicable, match="triton_moe_block"):
        t.apply(_stack(PREREQUISITES[:-1]), next(t.variants()))
    base = _stack(PREREQUISITES)
    for params in t.variants():
        t.apply(base, params)
    with pytest.raises(NotApplicable):
        t.apply(transformed(base, [t]), next(t.variants()))
    # an engine kept before the fused MoE's kernels and the block's projection were split into the helpers the
    # one launch calls: renew those first
    for path, helper, owner in ((FUSED, "def _down_tile(", "triton_moe_fused"),
                                ("moe_block.py", "def norm_projection(", "triton_moe_block")):
        with pytest.raises(NotApplicable, match=f"renew {owner}"):
            t.apply(base | {path: base[path].replace(helper, "def _older(")}, next(t.variants()))
    with pytest.raises(ValueError, match="power of two"):
        t.apply(base, next(t.variants()) | {"down_block_n": 12})


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    names = PREREQUISITES + OTHERS + ["triton_moe_one_launch"]
    rng = random.Random(5)
    stacks = [_stack(_proposer_order(names, rng)) for _ in range(8)]
    for name in ("decode_step.py", "static_state.py", "moe_block.py"):
        assert len({files[name] for files in stacks}) == 1, name
    assert "x = moe_block(x, lw.post_gain, lw.moe, cfg, sync)" in stacks[0]["decode_step.py"]


@pytest.mark.parametrize("shape, dtype, tiles", [
    ("tiny", torch.float32, "default"), ("tiny", torch.float32, "small"), ("odd", torch.float32, "default"),
    ("odd", torch.bfloat16, "small")])
def test_one_launch_equals_the_two_fused_kernels_and_leaves_its_counters_zero(packages, shape, dtype, tiles,
                                                                              monkeypatch):
    graph, fast = packages
    pkg = fast[tiles]
    one, fused = (importlib.import_module(f"{pkg.__name__}.{m}") for m in ("moe_one_launch", "fused_moe"))
    for name in ("BLOCK_N", "BLOCK_K", "DOWN_BLOCK_N", "DOWN_BLOCK_K"):  # the same sums in the same order
        monkeypatch.setattr(fused, name, getattr(one, name))
    for name in ("NUM_WARPS", "DOWN_WARPS"):  # a reduction's tree follows the warps
        monkeypatch.setattr(fused, name, one.NUM_WARPS)
    E, k, H, inter, block, shared = SHAPES[shape]
    cfg = dataclasses.replace(get_config("drama3").backbone, num_experts=E, num_experts_per_tok=k, hidden_size=H,
                              moe_intermediate_size=inter, fp8_block=block, shared_expert_intermediate_size=shared)
    gen = torch.Generator().manual_seed(len(shape))
    w = _moe_weights(pkg, cfg, gen, True)
    if dtype == torch.bfloat16:
        w = dataclasses.replace(w, shared_down=w.shared_down.bfloat16())
    sync = torch.zeros(2, dtype=torch.int32)
    for step in range(2):  # the second launch runs on the counters the first left
        x, res = ((torch.randn(1, H, generator=gen) * 3).to(dtype) for _ in range(2))
        logits, gate, up, scale = (torch.randn(1, n, generator=gen).to(dtype) * 2 for n in (E, shared, shared, 1))
        got = one.moe_one_launch(x, logits, gate, up, scale, w, cfg, res, sync)
        want = fused.fused_moe_decode(x, logits, gate, up, scale, w, cfg, residual=res)
        assert (want - res).float().abs().max() > 0.1
        assert torch.equal(got, want), step
        assert sync.tolist() == [0, 0]
    with pytest.raises(ValueError, match="int32 counters"):
        one.moe_one_launch(x, logits, gate, up, scale, w, cfg, res, torch.zeros(2))


def test_engine_teacher_forced_logits_match_reference(tmp_path, monkeypatch):
    """Every backbone layer of every decode frame goes through the one launch, each on its own counters. The tower
    runs its torch layers: its kernels are checked in the engine by interpret_triton_tower.py."""
    fast = load(transformed(_stack(PREREQUISITES), [triton_moe_one_launch]), tmp_path)
    use_torch_tower_layers([fast], tmp_path, monkeypatch.setattr)
    one = importlib.import_module(f"{fast.__name__}.moe_one_launch")
    original, counters = one.moe_one_launch, []  # moe_block imports it at each call: the patch is seen
    monkeypatch.setattr(one, "moe_one_launch", lambda *args: counters.append(args[-1].data_ptr()) or original(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1))
    layers = CFG.backbone.num_layers
    assert len(counters) == layers * (len(frames) - 1)
    assert len(set(counters[:layers])) == layers  # a pair per layer
