"""triton_backbone_deltanet on CPU, run by test_triton_interpreter.py with TRITON_INTERPRET=1: it applies only on
top of cuda_graph_frame and triton_tower (once), commutes with the other CUDA transforms of the recipes (the
backbone-attention kernels included, which share its switch in decode_step.py); its three kernels equal the torch
DeltaNet mixer step (x + deltanet_decode(norm(x))) over several steps, output and both states, at drama3-tiny's
dims in float32, at a wider bf16 geometry and at the full model's dims, with the default tiles and (but at full
dims) with tiles small enough for several value slices; and the engine with it passes drama3-tiny's
teacher-forced logits with every DeltaNet layer of every decode frame through the kernels. Compiled kernels and
timing run in tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os
import random

import pytest
import torch
from interpret_triton_moe_fused import _proposer_order
from interpret_triton_tower import cuda_like_bf16  # noqa: F401 (an autouse fixture: bf16 as CUDA rounds it)
from test_cuda_graphs import (
    REFERENCE,
    assert_applies_once_on_top_of,
    assert_kernels_run_every_decode_frame,
    load,
    transformed,
)

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_backbone_deltanet import triton_backbone_deltanet
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.config import get_config
from swarm.edits import apply_edits, patch_edits

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
RECIPE = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
          "cuda_graph_prefill", "graph_topk_sampling", "inductor_decode_steps", "triton_moe_fused",
          "triton_sampling", "triton_tower", "triton_backbone_attention"]
# drama3-tiny's backbone (float32 weights), a wider bf16 one (4 value heads per key head, dims of 32, a 3-row conv
# window) and the full model's (bf16, default tiles only: the interpreter takes ~10 minutes with the small ones)
GEOMETRIES = {"tiny": (CFG.backbone, torch.float32, 1e-5),
              "bf16": (dataclasses.replace(CFG.backbone, hidden_size=128, linear_num_key_heads=2,
                                           linear_num_value_heads=8, linear_key_head_dim=32,
                                           linear_value_head_dim=32, linear_conv_kernel=3), torch.bfloat16, 2e-2),
              "full": (get_config("drama3").backbone, torch.bfloat16, 2e-2)}
TILES = {"default": ({}, {}), "small": ({"block_v": 8, "num_warps": 2, "out_block_n": 16, "out_block_k": 16,
                                        "out_warps": 2}, {"block_n": 16, "block_k": 16})}
CASES = [(g, t) for g in sorted(GEOMETRIES) for t in sorted(TILES) if (g, t) != ("full", "small")]


def test_applies_only_on_top_of_the_tower_kernels_and_once():
    t = triton_backbone_deltanet
    assert t.devices == frozenset({"cuda"}) and t.lesson and t.feature == "gated_deltanet"
    fast = transformed(assert_applies_once_on_top_of(t, [cuda_graph_frame, triton_tower]), [t])
    assert "_deltanet_kernels(x, lw, cfg, state)" in fast["decode_step.py"]


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    names = RECIPE + ["triton_backbone_deltanet"]
    rng = random.Random(2)
    steps = {transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])
             ["decode_step.py"] for _ in range(12)}
    assert len(steps) == 1
    assert next(iter(steps)).count("\n_TRITON_ON_CPU = ") == 1


def _package(tmp_path, tiles: str):
    deltanet, tower = TILES[tiles]
    files = engine_files(REFERENCE)
    for t, overrides in ((cuda_graph_frame, {}), (triton_tower, tower), (triton_backbone_deltanet, deltanet)):
        patches = t.apply(files, next(t.variants()) | overrides)
        files = apply_edits(files, patch_edits(patches))
    return load(files, tmp_path)


def _module(pkg, name: str):
    return importlib.import_module(f"{pkg.__name__}.{name}")


def _layer(pkg, cfg, dtype: torch.dtype, gen: torch.Generator):
    """Random weights of one DeltaNet layer (the decode package's types), at magnitudes the model has."""
    kd, vd = cfg.linear_num_key_heads * cfg.linear_key_head_dim, cfg.linear_num_value_heads * cfg.linear_value_head_dim
    nv, h, channels = cfg.linear_num_value_heads, cfg.hidden_size, 2 * kd + vd

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dtype)

    w = _module(pkg, "decode_weights")
    mixer = w.DeltaNetWeights(
        proj=w.Projection([rand(2 * kd + 2 * vd, h, scale=h ** -0.5), rand(2 * nv, h, scale=h ** -0.5)], fuse=True),
        conv=rand(cfg.linear_conv_kernel, channels, scale=0.5), dt_bias=torch.randn(nv, generator=gen),
        neg_a=-torch.rand(nv, generator=gen) * 2, norm=(1 + rand(cfg.linear_value_head_dim, scale=0.1)).to(dtype),
        out_proj=rand(h, vd, scale=vd ** -0.5))
    return w.LayerWeights(input_gain=1 + torch.randn(h, generator=gen) * 0.1, post_gain=torch.ones(h), mixer=mixer,
                          moe=None)


@pytest.mark.parametrize(("geometry", "tiles"), CASES)
def test_kernels_equal_the_torch_mixer_step_by_step(tmp_path, geometry, tiles):
    cfg, dtype, tol = GEOMETRIES[geometry]
    pkg = _package(tmp_path, tiles)
    kernels = _module(pkg, "triton_deltanet_step")
    gen = torch.Generator().manual_seed(0)
    lw = _layer(pkg, cfg, dtype, gen)
    conv = torch.randn(cfg.linear_conv_kernel - 1, lw.mixer.conv.shape[1], generator=gen).to(dtype)
    recurrent = torch.randn(cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                            generator=gen) * 0.1
    want_state, got_state = (_module(pkg, "kv_cache").DeltaNetState(conv.clone(), recurrent.clone())
                             for _ in range(2))
    norm, torch_step = _module(pkg, "decode_ops").norm, _module(pkg, "decode_deltanet").deltanet_decode
    for step in range(1 if geometry == "full" else 3):  # full dims check the indexing; one step is ~18 s here
        x = torch.randn(1, cfg.hidden_size, generator=gen).to(dtype)
        want = x + torch_step(norm(x, lw.input_gain, cfg.rms_norm_eps), lw.mixer, cfg, want_state)
        got = kernels.deltanet_step(x, lw, cfg, got_state)
        assert got.shape == want.shape and got.dtype == want.dtype
        for name, g, w in (("output", got, want), ("conv window", got_state.conv, want_state.conv),
                           ("state", got_state.recurrent, want_state.recurrent)):
            scale = w.abs().max().item()
            err = (g.float() - w.float()).abs().max().item()
            assert err <= tol * max(1.0, scale), f"step {step}: {name} off by {err} (max |value| {scale})"


def test_engine_teacher_forced_logits_match_reference(tmp_path, monkeypatch):
    deltanet_layers = sum(not CFG.backbone.is_full_attention(i) for i in range(CFG.backbone.num_layers))
    assert_kernels_run_every_decode_frame(triton_backbone_deltanet, "_deltanet_kernels", deltanet_layers, tmp_path,
                                          monkeypatch)
