"""inductor_decode_steps: applies only on top of cuda_graph_frame, once, and makes the graphed frame's steps
torch.compile'd functions (the compile itself runs on the first call: on CUDA, tests/gpu/)."""
from __future__ import annotations

import importlib
import sys

import pytest
from test_cuda_graphs import REFERENCE, transformed

from candidates.repo import engine_files, write_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_steps import inductor_decode_steps
from knowledge_base.transforms.triton_fp8_moe import triton_fp8_moe

STEPS = ("attention_mixer", "deltanet_mixer", "tower_layer", "sample_main")


def test_needs_the_graph_engine_and_applies_once():
    assert inductor_decode_steps.requires == ("cuda_graph_frame",)
    assert inductor_decode_steps.devices == frozenset({"cuda"}) and inductor_decode_steps.lesson
    with pytest.raises(NotApplicable):
        inductor_decode_steps.apply(engine_files(REFERENCE), {})
    once = transformed(engine_files(REFERENCE), [cuda_graph_frame, inductor_decode_steps])
    with pytest.raises(NotApplicable):
        inductor_decode_steps.apply(once, {})


def test_compiles_the_steps_and_stacks_in_either_order(tmp_path, monkeypatch):
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame])
    compiled = transformed(graph, [inductor_decode_steps, triton_fp8_moe])
    assert compiled == transformed(graph, [triton_fp8_moe, inductor_decode_steps])
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, files in (("plain_steps", graph), ("inductor_steps", compiled)):
        write_files(files, tmp_path / name)
    plain = importlib.import_module("plain_steps.decode_step")
    fused = importlib.import_module("inductor_steps.decode_step")
    try:
        assert not any(hasattr(getattr(plain, s), "_torchdynamo_orig_callable") for s in STEPS)
        assert all(hasattr(getattr(fused, s), "_torchdynamo_orig_callable") for s in STEPS)
    finally:
        for mod in [m for m in sys.modules if m.split(".")[0] in ("plain_steps", "inductor_steps")]:
            del sys.modules[mod]
