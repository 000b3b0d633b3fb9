"""pipelined_frames on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1 (its
steps run the glue's and the code heads' kernels): it applies only on top of triton_frame_glue; the pipelined
engine's teacher-forced logits match the reference within the codebook, including a frame forced to EOS and one
forced to a text token; its seeded generations and streams are the one-frame engine's, frame for frame, with a
RAS window, whichever of a step's two branches runs first; it decodes up to the context's last row (where a step
runs the tail alone) and then refuses. On CPU the two halves run one after the other; the second CUDA stream and
the timing run in tests/gpu/."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, load, transformed, use_torch_tower_layers

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.pipelined_frames import pipelined_frames
from knowledge_base.transforms.triton_code_heads import triton_code_heads
from knowledge_base.transforms.triton_frame_glue import triton_frame_glue
from knowledge_base.transforms.triton_sampling import triton_sampling
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
PREREQUISITES = [cuda_graph_frame, triton_tower, triton_sampling, triton_code_heads, triton_frame_glue]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(the prerequisites alone, with pipelined_frames), their tower layers the torch step (use_torch_tower_layers)."""
    root, base = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), PREREQUISITES)
    pkgs = load(base, root), load(transformed(base, [pipelined_frames]), root)
    use_torch_tower_layers(pkgs, root)
    return pkgs


@pytest.fixture(scope="module")
def weights():
    return init_weights(CFG, seed=0, device="cpu")


def test_applies_only_on_top_of_the_glue_and_once():
    assert pipelined_frames.requires == ("cuda_graph_frame", "triton_frame_glue")
    assert pipelined_frames.devices == frozenset({"cuda"}) and pipelined_frames.lesson
    base = assert_applies_once_on_top_of(pipelined_frames, PREREQUISITES)
    with pytest.raises(NotApplicable, match="apply triton_frame_glue first"):
        pipelined_frames.apply(transformed(engine_files(REFERENCE), PREREQUISITES[:4]),
                               next(pipelined_frames.variants()))
    with pytest.raises(ValueError, match="-1 or 0"):
        pipelined_frames.apply(base, next(pipelined_frames.variants()) | {"side_priority": 2})


def test_teacher_forced_logits_match_the_reference(packages, weights):
    _, fast = packages
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    assert eng.program.pipeline is not None
    request = TTSRequest(text="Hello", max_frames=5, ignore_eos=True, seed=1)
    frames = ref.generate(request).frames.clone()
    frames[2, 0] = 7  # a text token: the next backbone input is that token, the frame's codes are placeholders
    frames[3, 0], frames[3, 1:] = CFG.eos_token_id, 0  # an EOS frame: the next input is EOS
    rows = build_rows(CFG, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    valid = CFG.codec.residual_codebook_size
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes[..., :valid], want.codes[..., :valid], atol=1e-4, rtol=1e-4)


def test_generations_and_streams_are_the_one_frame_engines(packages, weights):
    base, fast = packages
    plain, piped = (p.build_engine(CFG, weights, "cpu") for p in (base, fast))
    sampling = SamplingParams(code_top_k=8, ras_top_k=8, ras_window=4)  # tiny heads are 64 wide
    request = TTSRequest(text="Hello there", max_frames=10, ignore_eos=True, seed=5, sampling=sampling)
    want, got = plain.generate(request), piped.generate(request)
    assert torch.equal(got.frames, want.frames) and torch.equal(got.audio, want.audio)
    # the RAS window holds the last frames' main indices (here no draw repeated one, so no redraw showed it)
    assert torch.equal(piped.state.recent(4), plain.state.recent(4)) and (plain.state.recent(4) >= 0).all()
    chunks = list(piped.stream(request, StreamSchedule(first_chunk_frames=1)))
    assert torch.equal(torch.cat([c.frames for c in chunks]), want.frames)


def test_the_branches_are_independent_in_either_order(packages, weights):
    """On the GPU the head and the tail run at once: with the tail first here, the same frames as head first."""
    base, fast = packages
    plain, piped = (p.build_engine(CFG, weights, "cpu") for p in (base, fast))
    pipeline = piped.program.pipeline

    def tail_first(kind: str, span: int, sampling: SamplingParams) -> None:
        if kind.startswith("frame_first"):
            pipeline._head(span, sampling)
        elif kind.startswith("predict"):
            pipeline._head_draw(sampling)
        pipeline._select(sampling)
        pipeline._tail(span, sampling)
        if not (kind.startswith("predict") or kind.endswith("_last")):
            pipeline._head(span, sampling)

    pipeline.run = tail_first
    request = TTSRequest(text="Hello there", max_frames=8, ignore_eos=True, seed=3,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8, ras_window=4))
    assert torch.equal(piped.generate(request).frames, plain.generate(request).frames)


def test_decodes_to_the_contexts_last_row_then_refuses(packages, weights):
    _, fast = packages
    config = dataclasses.replace(CFG, max_context_rows=56, max_prompt_rows=52)  # "Hi" is 50 rows
    ref, eng = build_engine(config, weights, "cpu"), fast.build_engine(config, weights, "cpu")
    rows = build_rows(config, TTSRequest(text="Hi"), ref.tokenizer)
    frames = torch.tensor([[config.semantic_begin + 3, 3, *range(1, 10)]] * (config.max_context_rows - rows.shape[0]
                                                                               + 1))
    kinds, run = [], eng.program.run
    eng.program.run = lambda kind, *args: kinds.append(kind) or run(kind, *args)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    assert kinds == ["predict", "frame_first"] + ["frame"] * (len(frames) - 3) + ["frame_last"]
    with pytest.raises(ValueError, match="context is full"):
        eng.decode_frame()
