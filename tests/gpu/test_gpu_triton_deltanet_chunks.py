"""triton_deltanet_chunks on CUDA: at the full model's Gated DeltaNet dims the chunked kernels equal the reference
delta_rule (outputs and final state; 3xTF32 products to fp32's tolerance, one TF32 pass to 2%), in chunks of 32
and 64, also stopped at a device valid length and with correlated keys (the triangular inverse's hard case); their
time per layer call beside the recurrent kernel's is printed (run with -s) and the best must be lower at 209 rows;
and scripts/gpu_fast_check.py's compiled fast_all stack with it (and with triton_deltanet_prep, at either
precision) passes the teacher-forced gate at drama3-mid."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import assert_stack_passes_gate, config_named, delta_rule_inputs, graphed_call_us

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.model.deltanet import delta_rule

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
STACK = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
         "cuda_graph_prefill", "graph_topk_sampling"]


def _package(load_package, chunk: int, stages: int = 2, precision: str = "tf32x3"):
    return load_package([(TRANSFORMS[n], {}) for n in ("triton_prefill_moe", "cuda_graph_frame", "triton_deltanet",
                                                       "cuda_graph_prefill")]
                        + [(TRANSFORMS["triton_deltanet_chunks"], {"chunk": chunk, "stages": stages,
                                                                    "precision": precision})])


# against the fp32 recurrent rule: 3xTF32 products are about as precise; one TF32 pass carries a 10-bit mantissa
TOLERANCES = {"tf32x3": {"atol": 1e-4, "rtol": 1e-3}, "tf32": {"atol": 2e-2, "rtol": 2e-2}}


@pytest.mark.parametrize(("tokens", "valid", "correlated"), [(64, None, False), (209, None, False),
                                                             (256, 209, False), (256, 52, False), (209, None, True)])
@pytest.mark.parametrize(("chunk", "precision"), [(32, "tf32x3"), (64, "tf32x3"), (32, "tf32"), (64, "tf32")])
def test_chunked_kernels_match_delta_rule_at_full_dims(load_package, tokens, valid, correlated, chunk, precision):
    kernels = importlib.import_module(f"{_package(load_package, chunk, precision=precision).__name__}."
                                      "chunked_delta_rule")
    q, k, v, beta, g, state = delta_rule_inputs(tokens, correlated)
    n = tokens if valid is None else valid
    want_state, got_state = state.clone(), state.clone()
    want = delta_rule(q[:n], k[:n], v[:n], beta[:n], g[:n], want_state)
    length = None if valid is None else torch.tensor([valid], device=q.device)
    got = kernels.chunked_delta_rule(q, k, v, beta, g, got_state, length)
    torch.testing.assert_close(got[:n], want, **TOLERANCES[precision])
    torch.testing.assert_close(got_state, want_state, **TOLERANCES[precision])
    assert not got[n:].any()


def test_chunked_beats_the_recurrent_kernel_on_a_long_prompt(load_package):
    """A layer's call as a graphed prefill bucket makes it: 224 rows (voice's ladder bucket), 52 or 209 valid."""
    q, k, v, beta, g, state = delta_rule_inputs(224)
    pkg = _package(load_package, 32)
    recurrent = importlib.import_module(f"{pkg.__name__}.triton_deltanet").triton_delta_rule
    us = {}
    for chunk, stages, precision in ((16, 2, "tf32x3"), (32, 2, "tf32x3"), (64, 2, "tf32x3"), (32, 1, "tf32x3"),
                                     (32, 2, "tf32"), (64, 2, "tf32")):
        pkg = _package(load_package, chunk, stages, precision)
        chunked = importlib.import_module(f"{pkg.__name__}.chunked_delta_rule")
        for valid in (52, 209):
            length = torch.tensor([valid], device=q.device)
            us[f"chunk {chunk} stages {stages} {precision}, {valid} rows"] = graphed_call_us(
                chunked.chunked_delta_rule, (q, k, v, beta, g, state.clone(), length))
    for valid in (52, 209):
        us[f"recurrent, {valid} rows"] = graphed_call_us(recurrent, (q, k, v, beta, g, state.clone(),
                                                                     torch.tensor([valid], device=q.device)))
    print("\nus per layer call: " + ", ".join(f"{name} {t:.1f}" for name, t in us.items()))
    assert min(t for name, t in us.items() if name.startswith("chunk") and "209" in name) < \
        us["recurrent, 209 rows"], us


@pytest.mark.parametrize(("fronts", "precision"), [([], "tf32x3"), (["triton_deltanet_prep"], "tf32x3"),
                                                   (["triton_deltanet_prep"], "tf32")],
                         ids=["torch_front", "prep_front", "prep_front_tf32"])
def test_compiled_fast_all_with_it_passes_the_gate_at_mid_size(load_package, fronts, precision):
    steps = [(TRANSFORMS[n], {}) for n in STACK + fronts]
    steps.append((TRANSFORMS["triton_deltanet_chunks"], {"precision": precision}))
    assert_stack_passes_gate(load_package, config_named("drama3-mid"), steps)
