"""triton_backbone_attention on CPU, run by test_triton_interpreter.py with TRITON_INTERPRET=1: it applies only
on top of cuda_graph_frame and triton_tower (once), commutes with the other CUDA transforms of the recipes, and the
engine with it passes drama3-tiny's teacher-forced logits with every backbone attention layer of every decode
frame through the kernels. The kernels themselves (rotate-half RoPE included) are checked against
attention_decode in interpret_triton_tower.py; full-size dims and timing run in tests/gpu/."""
from __future__ import annotations

import os
import random

import pytest
from interpret_triton_moe_fused import _proposer_order
from test_cuda_graphs import REFERENCE, assert_kernels_run_every_decode_frame, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_backbone_attention import triton_backbone_attention
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.config import get_config

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
RECIPE = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
          "cuda_graph_prefill", "graph_topk_sampling", "inductor_decode_steps", "triton_moe_fused",
          "triton_sampling", "triton_tower"]


def test_applies_only_on_top_of_the_tower_kernels_and_once():
    t = triton_backbone_attention
    assert t.requires == ("cuda_graph_frame", "triton_tower") and t.devices == frozenset({"cuda"}) and t.lesson
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame])
    for without in (engine_files(REFERENCE), graph):
        with pytest.raises(NotApplicable):
            t.apply(without, {})
    fast = transformed(graph, [triton_tower, t])
    assert "_attention_kernels(x, lw, geo, cache, pos, future.shape[0], rope)" in fast["decode_step.py"]
    with pytest.raises(NotApplicable):
        t.apply(fast, {})


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    names = RECIPE + ["triton_backbone_attention"]
    rng = random.Random(1)
    steps = {transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])
             ["decode_step.py"] for _ in range(12)}
    assert len(steps) == 1


def test_engine_teacher_forced_logits_match_reference(tmp_path, monkeypatch):
    attention_layers = sum(CFG.backbone.is_full_attention(i) for i in range(CFG.backbone.num_layers))
    assert_kernels_run_every_decode_frame(triton_backbone_attention, "_attention_kernels", attention_layers, tmp_path,
                                          monkeypatch)
