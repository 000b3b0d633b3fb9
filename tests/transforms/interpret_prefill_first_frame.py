"""prefill_first_frame on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1 (the
draws run the glue's and the code heads' kernels): it applies only on top of the graphed prefill and the frame
pipeline, once; the engine's prefill draws the first frame itself (no predict step runs) and keeps the reference's
teacher-forced logits, with the first frame forced to a semantic, a text or an EOS frame; its seeded generations
and streams are the pipelined engine's without it, frame for frame, under non-default sampling; and with the
prefill's steps compiled (dynamo, aot_eager) the logits hold and no graph breaks. CUDA graphs and the time:
tests/gpu/test_gpu_prefill_first_frame.py."""
from __future__ import annotations

import dataclasses
import functools
import os

import pytest
import torch
from test_cuda_graphs import CFG, REFERENCE, load, transformed, use_torch_tower_layers
from torch._dynamo.utils import counters

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.pipelined_frames import pipelined_frames
from knowledge_base.transforms.prefill_first_frame import prefill_first_frame
from knowledge_base.transforms.triton_code_heads import triton_code_heads
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_frame_glue import triton_frame_glue
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from knowledge_base.transforms.triton_sampling import triton_sampling
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"


def _prefill(compile_steps: bool):
    """Row buckets from 32: the interpreted kernels take seconds per 32 rows."""
    space = cuda_graph_prefill.space | {"compile_steps": (compile_steps,), "min_rows": (32,)}
    return dataclasses.replace(cuda_graph_prefill, space=space)


PIPELINE = [cuda_graph_frame, triton_tower, triton_sampling, triton_code_heads, triton_frame_glue, pipelined_frames]
STACK = [cuda_graph_frame, triton_prefill_moe, triton_deltanet, _prefill(False), *PIPELINE[1:]]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """{"pipelined": STACK, "merged": STACK + prefill_first_frame, "compiled": that with the prefill's steps
    compiled}, their decode tower layers the torch step (use_torch_tower_layers)."""
    root, base = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), STACK)
    compiled = transformed(engine_files(REFERENCE), [*STACK[:3], _prefill(True), *STACK[4:], prefill_first_frame])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        pkgs = {"pipelined": load(base, root), "merged": load(transformed(base, [prefill_first_frame]), root),
                "compiled": load(compiled, root)}
    use_torch_tower_layers(pkgs.values(), root)
    return pkgs


@pytest.fixture(scope="module")
def weights():
    return init_weights(CFG, seed=0, device="cpu")


def test_applies_once_and_only_on_the_graphed_prefill_and_the_pipeline():
    assert prefill_first_frame.requires == ("cuda_graph_prefill", "pipelined_frames")
    with pytest.raises(NotApplicable, match="pipelined_frames"):
        prefill_first_frame.apply(transformed(engine_files(REFERENCE), STACK[:-1]), {})
    with pytest.raises(NotApplicable, match="cuda_graph_prefill"):
        prefill_first_frame.apply(transformed(engine_files(REFERENCE), PIPELINE), {})
    merged = transformed(transformed(engine_files(REFERENCE), STACK), [prefill_first_frame])
    with pytest.raises(NotApplicable):
        prefill_first_frame.apply(merged, {})


def _forced_frames(ref, request: TTSRequest, first: str) -> torch.Tensor:
    frames = ref.generate(request).frames.clone()
    if first == "text":  # a text token: its codes are placeholders the frame carries as given
        frames[0, 0] = 7
    elif first == "eos":
        frames[0, 0], frames[0, 1:] = CFG.eos_token_id, 0
    return frames


@pytest.mark.parametrize("first", ["semantic", "text", "eos"])
def test_prefill_draws_the_first_frame_and_keeps_the_reference_logits(packages, weights, first):
    ref, eng = build_engine(CFG, weights, "cpu"), packages["merged"].build_engine(CFG, weights, "cpu")
    kinds, run = [], eng.program.run
    eng.program.run = lambda kind, *args: kinds.append(kind) or run(kind, *args)
    request = TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1)
    frames = _forced_frames(ref, request, first)
    rows = build_rows(CFG, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    valid = CFG.codec.residual_codebook_size
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes[..., :valid], want.codes[..., :valid], atol=1e-4, rtol=1e-4)
    assert kinds == ["frame_first", "frame"]  # frames 1 and 2; frame 0 came with the prefill


def test_generations_and_streams_are_the_pipelined_engines(packages, weights):
    """Under other sampling parameters than the prewarmed default (the tiny heads are 64 wide: top-k 8 keeps the
    draws' filters in play)."""
    plain, merged = (packages[name].build_engine(CFG, weights, "cpu") for name in ("pipelined", "merged"))
    sampling = SamplingParams(temperature=0.7, top_p=0.8, ras_window=4, code_top_k=8, ras_top_k=8)
    request = TTSRequest(text="Hello there", max_frames=4, ignore_eos=True, seed=3, sampling=sampling)
    want = plain.generate(request)
    got = merged.generate(request)
    assert torch.equal(got.frames, want.frames) and torch.equal(got.audio, want.audio)
    chunks = list(merged.stream(request, StreamSchedule(window_ends=(2,), window_stride=2)))
    assert torch.equal(torch.cat([c.frames for c in chunks]), want.frames)


def test_compiled_prefill_keeps_the_logits_without_graph_breaks(packages, weights):
    ref, eng = build_engine(CFG, weights, "cpu"), packages["compiled"].build_engine(CFG, weights, "cpu")
    request = TTSRequest(text="Hello", max_frames=2, ignore_eos=True, seed=1)
    frames, rows = ref.generate(request).frames, build_rows(CFG, request, ref.tokenizer)
    counters.clear()
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    valid = CFG.codec.residual_codebook_size
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes[..., :valid], want.codes[..., :valid], atol=1e-4, rtol=1e-4)
    assert not counters["graph_break"]
