"""triton_deltanet_chunks on CPU through the Triton interpreter, run by test_triton_interpreter.py in a process started
with TRITON_INTERPRET=1 (the products then run in fp32, as 3xTF32 nearly does on the GPU): the chunked kernels
equal the reference delta_rule (outputs and final state) at drama3-tiny's head dims in chunks of 16, 32 and 64 and
at the full model's in chunks of 32 (with correlated keys too), over whole and partial chunks and stopped early by a
device row count; only calls of at least min_rows tokens run chunked; and the graphed prefill with it keeps
drama3-tiny's teacher-forced logits, with triton_deltanet_prep's op reaching it. Full size and the time beside the
recurrent kernel on CUDA: tests/gpu/test_gpu_triton_deltanet_chunks.py."""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch
import torch.nn.functional as F
from test_cuda_graphs import CFG, REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_deltanet_chunks import triton_deltanet_chunks
from knowledge_base.transforms.triton_deltanet_prep import triton_deltanet_prep
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.bench import bench_requests
from reference_runtime.model import build_engine
from reference_runtime.model.deltanet import delta_rule
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
# buckets from 32 rows: the interpreted kernels take seconds per 32 rows
PREFILL = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"compile_steps": (False,),
                                                                                    "min_rows": (32,)})
STACK = [cuda_graph_frame, triton_prefill_moe, triton_deltanet, PREFILL]


def _chunks(chunk: int):
    return dataclasses.replace(triton_deltanet_chunks, space=triton_deltanet_chunks.space | {"chunk": (chunk,)})


@pytest.fixture(scope="module", params=[16, 32, 64], ids=["chunk16", "chunk32", "chunk64"])
def package(request, tmp_path_factory):
    return load(transformed(engine_files(REFERENCE), [*STACK, _chunks(request.param)]),
                tmp_path_factory.mktemp("pkg"))


def _kernels(pkg):
    return importlib.import_module(f"{pkg.__name__}.chunked_delta_rule")


def _inputs(T: int, nv: int, dk: int, dv: int, correlated: bool = False):
    """delta_rule's inputs as the layer makes them (unit-norm k, q scaled by dk^-0.5, beta in (0, 1), g < 0) and
    a nonzero start state. `correlated`: the hard case for the chunk form's triangular inverse, keys close to one
    direction per head, beta near 1 and almost no decay (A's entries near 1)."""
    gen = torch.Generator().manual_seed(T * 7 + dk)
    q = F.normalize(torch.randn(T, nv, dk, generator=gen), dim=-1) * dk ** -0.5
    k = torch.randn(T, nv, dk, generator=gen)
    if correlated:
        k = torch.randn(1, nv, dk, generator=gen) + 0.2 * k
    k = F.normalize(k, dim=-1)
    v = torch.randn(T, nv, dv, generator=gen)
    beta, g = torch.rand(T, nv, generator=gen), -torch.rand(T, nv, generator=gen)
    if correlated:
        beta, g = 0.9 + 0.1 * beta, 0.01 * g
    return q, k, v, beta, g, torch.randn(nv, dk, dv, generator=gen)


def test_applies_on_the_graphed_prefill_once():
    files = engine_files(REFERENCE)
    with pytest.raises(NotApplicable):
        triton_deltanet_chunks.apply(transformed(files, [triton_deltanet]), next(triton_deltanet_chunks.variants()))
    base = transformed(files, STACK)
    for params in triton_deltanet_chunks.variants():
        triton_deltanet_chunks.apply(base, params)
    with pytest.raises(NotApplicable):
        triton_deltanet_chunks.apply(transformed(base, [triton_deltanet_chunks]), {})
    with pytest.raises(ValueError, match="at least 16"):
        triton_deltanet_chunks.apply(base, next(triton_deltanet_chunks.variants()) | {"chunk": 8})
    with pytest.raises(ValueError, match="precision must be one of"):
        triton_deltanet_chunks.apply(base, next(triton_deltanet_chunks.variants()) | {"precision": "ieee"})


@pytest.mark.parametrize(("T", "nv", "dk", "dv", "valid", "correlated"), [
    (16, 4, 16, 16, None, False), (37, 4, 16, 16, None, False), (100, 2, 16, 32, 50, False),
    (64, 2, 16, 16, 1, False), (70, 2, 128, 128, None, False), (96, 2, 128, 128, 61, False),
    (80, 2, 128, 128, None, True)],
    ids=["one_chunk", "partial_chunk", "valid", "valid_one_row", "full_dims", "full_dims_valid", "correlated"])
def test_kernels_match_delta_rule(package, T, nv, dk, dv, valid, correlated, monkeypatch):
    if dk == 128 and _kernels(package).CHUNK != 32:
        pytest.skip("the full head dims in chunks of 32 (the default) only: each compiles for sm_90 in CI")
    q, k, v, beta, g, state = _inputs(T, nv, dk, dv, correlated)
    n = T if valid is None else valid
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q[:n], k[:n], v[:n], beta[:n], g[:n], want_state)
    empty = torch.empty

    def poisoned(*args, **kwargs):  # the kernels' buffers and output hold NaN until written (torch.empty need not)
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty", poisoned)
    got = _kernels(package).chunked_delta_rule(q, k, v, beta, g, got_state, None if valid is None else
                                               torch.tensor([n]))
    monkeypatch.undo()
    torch.testing.assert_close(got[:n], want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_state, want_state, rtol=1e-4, atol=1e-5)
    assert not got[n:].any()


def test_only_calls_of_min_rows_or_more_run_chunked(package, monkeypatch):
    deltanet, calls = importlib.import_module(f"{package.__name__}.deltanet"), []
    kernels = _kernels(package)
    chunked = kernels.chunked_delta_rule
    monkeypatch.setattr(kernels, "chunked_delta_rule", lambda q, *args: calls.append(q.shape[0]) or chunked(q, *args))
    for T in (1, deltanet.MIN_ROWS - 1, deltanet.MIN_ROWS):
        q, k, v, beta, g, state = _inputs(T, 4, 16, 16)
        want_state = state.clone()
        torch.testing.assert_close(deltanet.delta_rule(q, k, v, beta, g, state),
                                   delta_rule(q, k, v, beta, g, want_state), rtol=1e-4, atol=1e-5)
    assert calls == [deltanet.MIN_ROWS]


def test_graphed_prefill_keeps_the_reference_logits(tmp_path, monkeypatch):
    """In chunks of 64 (the prompt's bucket in one: the inverse merged from its four 16-row blocks), reached through
    triton_deltanet_prep's op."""
    pkg = load(transformed(engine_files(REFERENCE), [*STACK, triton_deltanet_prep, _chunks(64)]), tmp_path)
    kernels, lengths = _kernels(pkg), []
    chunked = kernels.chunked_delta_rule
    monkeypatch.setattr(kernels, "chunked_delta_rule", lambda q, *args: lengths.append(q.shape[0]) or chunked(q, *args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), pkg.build_engine(CFG, weights, "cpu")
    request = bench_requests(CFG, 2)["hello"]
    rows, frames = build_rows(CFG, request, ref.tokenizer), ref.generate(request).frames
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes, want.codes, atol=1e-4, rtol=1e-4)
    assert lengths and set(lengths) == {64}  # the prompt's 52 rows in their bucket, every DeltaNet layer
