"""triton_deltanet on CPU through the Triton interpreter, run by test_triton_interpreter.py in a process started
with TRITON_INTERPRET=1: the kernel equals the reference delta_rule (outputs and final state) at drama3-tiny's
head dims and at dims that split the value dim over programs, and the reference and graph engines with the
transform keep the reference's teacher-forced logits on drama3-tiny, with the kernel running in both prefill and
(graph engine) decode. The chunked form (chunk_rows 64 and 32) equals delta_rule too, at tiny and full head dims,
over partial chunks and with a device valid length, and runs only for calls of at least chunk_rows tokens.
Full-size dims on CUDA: tests/gpu/."""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch
import torch.nn.functional as F
from test_cuda_graphs import REFERENCE, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from reference_runtime.api import TTSRequest
from reference_runtime.bench import bench_requests
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model.deltanet import delta_rule
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
BASES = {"reference": [], "graph": [cuda_graph_frame]}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pkg")
    return {name: load(transformed(engine_files(REFERENCE), [*base, triton_deltanet]), root)
            for name, base in BASES.items()}


@pytest.fixture(scope="module", params=[64, 32], ids=["chunk64", "chunk32"])
def chunked(request, tmp_path_factory):
    """The reference package with triton_deltanet(chunk_rows=64 or 32)."""
    transform = dataclasses.replace(triton_deltanet, space=triton_deltanet.space | {"chunk_rows": (request.param,)})
    return load(transformed(engine_files(REFERENCE), [transform]), tmp_path_factory.mktemp("chunked"))


def _kernels(pkg):
    return importlib.import_module(f"{pkg.__name__}.triton_deltanet")


def _inputs(T: int, nv: int, dk: int, dv: int):
    """delta_rule's inputs as the layer makes them (unit-norm k, q scaled by dk^-0.5, beta in (0, 1), g < 0) and
    a nonzero start state."""
    gen = torch.Generator().manual_seed(T)
    q = F.normalize(torch.randn(T, nv, dk, generator=gen), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(T, nv, dk, generator=gen), dim=-1)
    v = torch.randn(T, nv, dv, generator=gen)
    beta, g = torch.rand(T, nv, generator=gen), -torch.rand(T, nv, generator=gen)
    return q, k, v, beta, g, torch.randn(nv, dk, dv, generator=gen)


def test_applies_to_the_reference_and_to_the_graph_engine():
    assert triton_deltanet.requires == () and triton_deltanet.devices == frozenset({"cuda"})
    for name, base in BASES.items():
        files = transformed(engine_files(REFERENCE), base)
        for params in triton_deltanet.variants():
            paths = {p.path for p in triton_deltanet.apply(files, params)}
            assert ("decode_deltanet.py" in paths) == (name == "graph")
        with pytest.raises(NotApplicable):
            triton_deltanet.apply(transformed(files, [triton_deltanet]), next(triton_deltanet.variants()))


@pytest.mark.parametrize(("T", "nv", "dk", "dv"), [(1, 4, 16, 16), (5, 4, 16, 16), (37, 4, 16, 16),
                                                   (19, 3, 32, 64)], ids=["T1", "T5", "T37", "two_value_blocks"])
def test_kernel_matches_delta_rule(packages, T, nv, dk, dv):
    q, k, v, beta, g, state = _inputs(T, nv, dk, dv)
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q, k, v, beta, g, want_state)
    got = _kernels(packages["reference"]).triton_delta_rule(q, k, v, beta, g, got_state)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_state, want_state, rtol=1e-5, atol=1e-6)


def test_no_tokens_leave_the_state_alone(packages):
    q, k, v, beta, g, state = _inputs(0, 4, 16, 16)
    got_state = state.clone()
    out = _kernels(packages["reference"]).triton_delta_rule(q, k, v, beta, g, got_state)
    assert out.shape == (0, 4, 16) and torch.equal(got_state, state)


def test_rejects_a_key_dim_that_is_not_a_power_of_two(packages):
    with pytest.raises(ValueError, match="power of two"):
        _kernels(packages["reference"]).triton_delta_rule(*_inputs(2, 2, 24, 16))


@pytest.mark.parametrize("base", sorted(BASES))
def test_engine_teacher_forced_logits_match_reference(packages, base, monkeypatch):
    kernels = _kernels(packages[base])
    kernel, lengths = kernels.triton_delta_rule, []

    def counted(q, *args):
        lengths.append(q.shape[0])
        return kernel(q, *args)
    monkeypatch.setattr(kernels, "triton_delta_rule", counted)
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), packages[base].build_engine(CFG, weights, "cpu")
    assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1), tol=1e-5)
    assert max(lengths) > 1 and (base == "reference" or 1 in lengths)  # prefill; the graph engine's decode steps


@pytest.mark.parametrize(("T", "nv", "dk", "dv", "valid"), [(64, 4, 16, 16, None), (70, 4, 16, 16, None),
                                                            (100, 2, 16, 32, 50), (130, 2, 128, 128, None),
                                                            (96, 2, 128, 128, 70)],
                         ids=["one_chunk", "partial_chunk", "valid", "full_dims", "full_dims_valid"])
def test_chunked_kernels_match_delta_rule(chunked, T, nv, dk, dv, valid):
    q, k, v, beta, g, state = _inputs(T, nv, dk, dv)
    n = T if valid is None else valid
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q[:n], k[:n], v[:n], beta[:n], g[:n], want_state)
    got = _kernels(chunked).triton_delta_rule(q, k, v, beta, g, got_state, None if valid is None else torch.tensor([n]))
    torch.testing.assert_close(got[:n], want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_state, want_state, rtol=1e-4, atol=1e-5)
    assert not got[n:].any()


def test_only_calls_of_chunk_rows_tokens_or_more_run_chunked(chunked, monkeypatch):
    kernels, calls = _kernels(chunked), []
    chunked_form = kernels._chunked
    monkeypatch.setattr(kernels, "_chunked", lambda q, *args: calls.append(q.shape[0]) or chunked_form(q, *args))
    # the heads and dims of the tests above: no kernel specialisation that sm90_compile.py compiles for this alone
    for T in (1, kernels.CHUNK_ROWS - 1, kernels.CHUNK_ROWS):
        kernels.triton_delta_rule(*_inputs(T, 4, 16, 16))
    assert calls == [kernels.CHUNK_ROWS]


def test_engine_with_chunks_keeps_the_reference_logits(chunked):
    """The multi-sentence prompt: 135 rows, whole chunks and a partial one."""
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), chunked.build_engine(CFG, weights, "cpu")
    request = bench_requests(CFG, 3)["sentences"]
    frames = ref.generate(request).frames
    rows = build_rows(CFG, request, ref.tokenizer)
    assert rows.shape[0] == 135
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
