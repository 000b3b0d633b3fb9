"""triton_deltanet on CUDA: the kernel equals the reference delta_rule (outputs and final state) at the full
model's Gated DeltaNet dims for decode and prompt-sized token counts, so do the chunked kernels (chunk_rows; also
stopped at a device valid length, as in a graph-captured prefill bucket), whose time beside the recurrent
kernel's is printed (run with -s), and the transformed reference and graph engines pass the teacher-forced gate
at drama3-tiny and drama3-mid (the graph engine replays the kernel inside its captured decode frame)."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_passes_gate, config_named, delta_rule_inputs, graphed_call_us

from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from reference_runtime.model import build_engine
from reference_runtime.model.deltanet import delta_rule
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu


def _kernels(load_package, params: dict):
    return importlib.import_module(f"{load_package([(triton_deltanet, params)]).__name__}.triton_deltanet")


@pytest.mark.parametrize("tokens", [1, 52, 209])
@pytest.mark.parametrize("block_v", [16, 32, 64])
def test_kernel_matches_delta_rule_at_full_dims(load_package, tokens, block_v):
    kernels = _kernels(load_package, {"block_v": block_v, "chunk_rows": 0})
    q, k, v, beta, g, state = delta_rule_inputs(tokens)
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q, k, v, beta, g, want_state)  # the reference package: its torch loop on CUDA too
    got = kernels.triton_delta_rule(q, k, v, beta, g, got_state)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("tokens", "valid"), [(64, None), (209, None), (256, 209), (256, 52)])
@pytest.mark.parametrize("chunk_rows", [64, 32])
def test_chunked_kernels_match_delta_rule_at_full_dims(load_package, tokens, valid, chunk_rows):
    kernels = _kernels(load_package, {"chunk_rows": chunk_rows})
    q, k, v, beta, g, state = delta_rule_inputs(tokens)
    n = tokens if valid is None else valid
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q[:n], k[:n], v[:n], beta[:n], g[:n], want_state)
    length = None if valid is None else torch.tensor([valid], device=q.device)
    got = kernels.triton_delta_rule(q, k, v, beta, g, got_state, length)
    torch.testing.assert_close(got[:n], want, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_state, want_state, atol=1e-5, rtol=1e-4)
    assert not got[n:].any()


def test_chunked_kernel_time(load_package):
    """Per layer call as a graph-captured prefill bucket makes it (256 rows, the first 52 or 209 valid), timed over
    a CUDA graph of 20 calls, so host launch overhead does not count."""
    q, k, v, beta, g, state = delta_rule_inputs(256)
    for chunk_rows in (0, 64, 32):
        kernels = _kernels(load_package, {"chunk_rows": chunk_rows})
        for valid in (52, 209):
            length = torch.tensor([valid], device=q.device)
            us = graphed_call_us(kernels.triton_delta_rule, (q, k, v, beta, g, state, length))
            print(f"\nchunk_rows {chunk_rows}, valid {valid}: {us:.1f} us per call")


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("base", [[], [cuda_graph_frame]], ids=["reference", "graph"])
@pytest.mark.parametrize("chunk_rows", [0, 64])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, base, chunk_rows):
    config, device = config_named(config_name), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    ref = build_engine(config, weights, device)
    steps = [*((t, {}) for t in base), (triton_deltanet, {"chunk_rows": chunk_rows})]
    assert_passes_gate(config, ref, load_package(steps).build_engine(config, weights, device))
