"""cuda_graph_prefill (compile_steps=False) on CPU, run by test_triton_interpreter.py in a process started with
TRITON_INTERPRET=1: the padded prefill program runs eagerly (as its graphs would replay it) with the Triton kernels
interpreted. On drama3-tiny its teacher-forced logits equal those of the same stack without it and of the
reference for prompts below, at and above a row bucket's boundary (text and voice), an earlier longer prompt leaves
nothing behind, seeded generation (through the torch fallback) gives the same frames, and the DeltaNet recurrence
stops at the device row count in both the kernel and the torch loop. The compiled program:
interpret_compiled_prefill.py; graph capture and replay on CUDA: tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch
from interpret_triton_deltanet import _inputs
from test_cuda_graphs import REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.bench import bench_requests
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import ForcedLogits, teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
BASE = [cuda_graph_frame, triton_prefill_moe, triton_deltanet]
# the uncompiled variant: compiled steps keep the branch they traced (dynamo does not guard on os.environ), and the
# torch fallback test below unsets TRITON_INTERPRET
EAGER = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"compile_steps": (False,)})
FRAMES = 3  # teacher-forced frames: prefill's prediction and two decode steps, which read the prefilled state


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root, files = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), BASE)
    return load(files, root), load(transformed(files, [EAGER]), root)


@pytest.fixture(scope="module")
def engines(packages):
    weights = init_weights(CFG, seed=0, device="cpu")
    return build_engine(CFG, weights, "cpu"), *(p.build_engine(CFG, weights, "cpu") for p in packages)


def _voice(frames: int) -> TTSRequest:
    codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, frames),
                          generator=torch.Generator().manual_seed(frames))
    return TTSRequest(text="Nice to meet you.", references=(VoiceReference("This is my voice.", codes),),
                      max_frames=FRAMES, ignore_eos=True, seed=1)


@pytest.fixture(scope="module")
def prompts(engines):
    """name -> (rows, teacher frames), around the buckets 64 and 128 (each Triton-interpreted prefill takes
    seconds): hello has 52 rows; voice is a voice prompt of exactly 128 rows (audio rows 82..98); above_64 is
    its first 65 rows, which pad to 128."""
    ref = engines[0]
    hello, voice = bench_requests(CFG, FRAMES)["hello"], _voice(17)
    rows = {"hello": build_rows(CFG, hello, ref.tokenizer), "voice": build_rows(CFG, voice, ref.tokenizer)}
    assert rows["voice"].shape[0] == 128
    rows["above_64"] = rows["voice"][:65]
    frames = ref.generate(voice).frames
    return {name: (r, frames) for name, r in rows.items()}


@pytest.fixture(scope="module")
def forced(engines, prompts):
    """The graph-prefill engine's teacher-forced logits of each prompt on a fresh engine, in this order, and
    ("above_64", "again") those of above_64 once more after voice: then its padded input rows and the cache rows
    past it hold voice's data."""
    eng = engines[2]
    out = {name: teacher_forced(eng, *prompts[name]) for name in ("hello", "above_64", "voice")}
    return out | {("above_64", "again"): teacher_forced(eng, *prompts["above_64"])}


def test_applies_only_on_top_of_its_three_requirements():
    assert cuda_graph_prefill.requires == ("cuda_graph_frame", "triton_prefill_moe", "triton_deltanet")
    assert cuda_graph_prefill.devices == frozenset({"cuda"}) and cuda_graph_prefill.lesson
    reference = engine_files(REFERENCE)
    for missing in BASE:
        with pytest.raises(NotApplicable, match=missing.name):
            cuda_graph_prefill.apply(transformed(reference, [t for t in BASE if t is not missing]), {})
    files = transformed(reference, BASE)
    for params in cuda_graph_prefill.variants():
        paths = {p.path for p in cuda_graph_prefill.apply(files, params)}
        assert {"prefill_program.py", "prefill_graphs.py", "prefill_ops.py", "graph_engine.py", "deltanet.py",
                "moe.py"} <= paths
    with pytest.raises(NotApplicable):
        cuda_graph_prefill.apply(transformed(files, [cuda_graph_prefill]), next(cuda_graph_prefill.variants()))


def _assert_close(got: ForcedLogits, want: ForcedLogits, tol: float) -> None:
    torch.testing.assert_close(got.main, want.main, atol=tol, rtol=tol)
    torch.testing.assert_close(got.codes, want.codes, atol=tol, rtol=tol)


@pytest.mark.parametrize("name", ["hello", "voice", "above_64"])
def test_teacher_forced_logits_match_the_reference(engines, prompts, forced, name):
    _assert_close(forced[name], teacher_forced(engines[0], *prompts[name]), 1e-5)


def test_teacher_forced_logits_match_the_stack_without_it(engines, prompts, forced):
    """On the most padded prompt (the others through the reference: each interpreted prefill takes seconds)."""
    _assert_close(forced["above_64"], teacher_forced(engines[1], *prompts["above_64"]), 1e-5)


def test_a_longer_prompt_before_leaves_no_trace(forced):
    again, first = forced["above_64", "again"], forced["above_64"]
    assert torch.equal(again.main, first.main) and torch.equal(again.codes, first.codes)


def test_seeded_generation_gives_the_same_frames(engines, monkeypatch):
    """Through the torch fallback (as test_torch_fallback_matches_the_reference): both engines would run the same
    kernels (unpadded, padded), whose padded outputs the teacher-forced tests check, so the kernels would add
    nothing here but two interpreted prefills."""
    monkeypatch.delenv("TRITON_INTERPRET")
    _, base, eng = engines
    request = bench_requests(CFG, 4, seed=7)["hello"]
    assert torch.equal(eng.generate(request).frames, base.generate(request).frames)


def test_torch_fallback_matches_the_reference(engines, prompts, monkeypatch):
    """Without Triton (a CPU build) the same padded program runs the MoE loop and the masked delta-rule loop, fast
    enough here for the benchmark's 209-row voice prompt (bucket 256) too."""
    monkeypatch.delenv("TRITON_INTERPRET")
    ref, _, eng = engines
    frames = prompts["voice"][1]
    for rows in (prompts["above_64"][0], build_rows(CFG, bench_requests(CFG, 1)["voice"], ref.tokenizer)):
        _assert_close(teacher_forced(eng, rows, frames), teacher_forced(ref, rows, frames), 1e-5)


@pytest.mark.parametrize("kernel", [True, False], ids=["triton", "torch_loop"])
def test_delta_rule_stops_at_the_valid_length(packages, monkeypatch, kernel):
    if not kernel:
        monkeypatch.delenv("TRITON_INTERPRET")
    delta_rule = importlib.import_module(f"{packages[1].__name__}.deltanet").delta_rule
    q, k, v, beta, g, state = _inputs(9, 3, 16, 32)
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q[:5], k[:5], v[:5], beta[:5], g[:5], want_state)
    got = delta_rule(q, k, v, beta, g, got_state, torch.tensor([5]))
    torch.testing.assert_close(got[:5], want, rtol=1e-5, atol=1e-6)
    assert torch.equal(got_state, want_state) and not got[5:].any()
