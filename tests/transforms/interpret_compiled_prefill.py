"""cuda_graph_prefill(compile_steps=True) on CPU, run by test_triton_interpreter.py in a process started with
TRITON_INTERPRET=1: the prefill program's backbone layers and tower go through dynamo and AOT autograd (backend
aot_eager: inductor's C++ build takes minutes on 2 cores; inductor itself runs in the GPU test), the Triton
kernels interpreted inside their custom ops. On drama3-tiny the teacher-forced logits match the reference in two
row buckets, the second compiling nothing more (the rows are a dynamic dim), and dynamo breaks no graph (the
kernels are opaque ops). The delta rule runs in chunks of 32 (triton_deltanet chunk_rows), so inside the program
the chunked kernels stop at the prompt's device row count. With triton_prefill_route and prefill_fused_projections
and gqa_sdpa on top, the same holds (the prefill's attention then causal without a mask, KV heads shared by
enable_gqa), and the padding rows route to no expert. The uncompiled variant:
interpret_cuda_graph_prefill.py; inductor and capture on CUDA: tests/gpu/test_gpu_compiled_prefill.py."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import os

import pytest
import torch
from test_cuda_graphs import REFERENCE, load, transformed
from torch._dynamo.utils import counters

from candidates.repo import engine_files
from knowledge_base.transforms.attention import gqa_sdpa
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.prefill_fused_projections import prefill_fused_projections
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route
from reference_runtime.api import SamplingParams
from reference_runtime.bench import bench_requests
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
FRAMES = 2  # the prefill's prediction and a decode step, which reads the prefilled caches and states


def _variant(compile_steps: bool):
    """Row buckets from 32: the interpreted kernels take seconds per 32 rows."""
    space = cuda_graph_prefill.space | {"compile_steps": (compile_steps,), "min_rows": (32,)}
    return dataclasses.replace(cuda_graph_prefill, space=space)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg")
    chunked = dataclasses.replace(triton_deltanet, space=triton_deltanet.space | {"chunk_rows": (32,)})
    base = transformed(engine_files(REFERENCE), [cuda_graph_frame, triton_prefill_moe, chunked])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        packages = {on: load(transformed(base, [_variant(on)]), root) for on in (False, True)}
        packages["routed"] = load(transformed(base, [_variant(True), triton_prefill_route, prefill_fused_projections,
                                                     gqa_sdpa]), root)
        return packages


def test_compile_steps_compiles_the_layer_and_tower_steps(packages):
    assert next(cuda_graph_prefill.variants())["compile_steps"] is True  # the expected fastest first
    for on, pkg in ((False, packages[False]), (True, packages[True])):
        program = importlib.import_module(f"{pkg.__name__}.prefill_program")
        assert program.COMPILE_STEPS is on
        assert all(hasattr(step, "_torchdynamo_orig_callable") is on for step in (program.backbone_layer,
                                                                                  program.tower))


# "routed": with triton_prefill_route's op in each layer, prefill_fused_projections' shared GEMMs and gqa_sdpa's
# maskless causal attention
@pytest.mark.parametrize("engine", [True, "routed"])
def test_one_compile_serves_every_bucket_and_matches_the_reference(packages, engine):
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), packages[engine].build_engine(CFG, weights, "cpu")
    request = bench_requests(CFG, FRAMES)["hello"]
    prompt, frames = build_rows(CFG, request, ref.tokenizer), ref.generate(request).frames
    assert prompt.shape[0] == 52
    counters.clear()
    graphs = []
    for rows in (prompt, prompt[:31]):  # buckets 64 and 32
        got, want = teacher_forced(eng, rows, frames), teacher_forced(ref, rows, frames)
        torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs == [3, 3]  # a DeltaNet layer, an attention layer, the tower: once each
    assert not counters["graph_break"]


def test_the_routed_prefill_counts_only_the_prompts_rows(packages):
    """triton_prefill_route routes a bucket's padding rows to no expert: a prefill of 52 rows padded to 64 counts
    the reference's picks over the 52 (without it, the padding's picks count too, and read their experts)."""
    weights = init_weights(CFG, seed=0, device="cpu")
    ref = build_engine(CFG, weights, "cpu")
    rows = build_rows(CFG, bench_requests(CFG, FRAMES)["hello"], ref.tokenizer)

    def counted(engine) -> torch.Tensor:
        before = engine.model.backbone.expert_counts().clone()
        engine.prefill(rows, SamplingParams(), 0)
        return engine.model.backbone.expert_counts() - before

    want = counted(ref)
    assert torch.equal(counted(packages["routed"].build_engine(CFG, weights, "cpu")), want)
    assert not torch.equal(counted(packages[True].build_engine(CFG, weights, "cpu")), want)
