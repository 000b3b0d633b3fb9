"""triton_deltanet_prep on CPU through the Triton interpreter, run by test_triton_interpreter.py in a process started
with TRITON_INTERPRET=1: a DeltaNet layer's call through the front kernel (and the delta rule kernel) gives its
torch path's output, next conv state and recurrent state, from nonzero states, at drama3-tiny's dims and at the
full model's head dims, in fp32 and bf16, for calls shorter than the conv's left context, and with a device row
count (`valid`) that stops the state early; the compiled prefill (cuda_graph_prefill, dynamo with aot_eager) with
it keeps drama3-tiny's teacher-forced logits over the prefill and a decode step (which reads the carried conv
state), the op breaking no graph. Full size on CUDA: tests/gpu/test_gpu_triton_deltanet_prep.py."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import os

import pytest
import torch
from test_cuda_graphs import CFG, REFERENCE, load, transformed
from torch._dynamo.utils import counters

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.deltanet import deltanet_conv_unfold
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_deltanet_prep import triton_deltanet_prep
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.bench import bench_requests
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
# the prefill's buckets from 32 rows, compiled: the interpreted kernels take seconds per 32 rows
PREFILL = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"min_rows": (32,)})
STACK = [cuda_graph_frame, triton_prefill_moe, triton_deltanet, PREFILL]
FULL_HEADS = dataclasses.replace(CFG.backbone, linear_num_key_heads=16, linear_num_value_heads=32,
                                 linear_key_head_dim=128, linear_value_head_dim=128)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
        return load(transformed(engine_files(REFERENCE), [*STACK, triton_deltanet_prep]),
                    tmp_path_factory.mktemp("pkg"))


def test_needs_the_graphed_prefill_and_applies_over_either_conv_form():
    files = engine_files(REFERENCE)
    with pytest.raises(NotApplicable):
        triton_deltanet_prep.apply(files, next(triton_deltanet_prep.variants()))
    base = transformed(files, STACK)
    for conv in ([], [deltanet_conv_unfold]):
        stacked = transformed(base, conv)
        for params in triton_deltanet_prep.variants():
            triton_deltanet_prep.apply(stacked, params)
        with pytest.raises(NotApplicable):
            triton_deltanet_prep.apply(transformed(stacked, [triton_deltanet_prep]), {"num_warps": 1})


def _layer(package, cfg, dtype: torch.dtype):
    """A GatedDeltaNet of `cfg` on random weights, and a nonzero state factory."""
    deltanet = importlib.import_module(f"{package.__name__}.deltanet")
    kd, vd, h = cfg.linear_num_key_heads * cfg.linear_key_head_dim, \
        cfg.linear_num_value_heads * cfg.linear_value_head_dim, cfg.hidden_size
    channels, nv = 2 * kd + vd, cfg.linear_num_value_heads
    gen = torch.Generator().manual_seed(kd + vd)
    shapes = {"in_proj_qkvz.weight": (2 * kd + 2 * vd, h), "in_proj_ba.weight": (2 * nv, h),
              "conv1d.weight": (channels, 1, cfg.linear_conv_kernel), "dt_bias": (nv,), "A_log": (nv,),
              "norm.weight": (cfg.linear_value_head_dim,), "out_proj.weight": (h, vd)}
    weights = {f"l.{name}": (torch.randn(shape, generator=gen) * (0.5 if len(shape) == 1 else h ** -0.5)).to(dtype)
               for name, shape in shapes.items()}
    layer = deltanet.GatedDeltaNet(weights, "l.", cfg, torch.device("cpu"))

    def state():
        s = layer.new_state(dtype, torch.device("cpu"))
        s.conv = torch.randn(s.conv.shape, generator=gen).to(dtype)
        s.recurrent = torch.randn(s.recurrent.shape, generator=gen) * 0.1
        return s
    return layer, state, gen


@pytest.mark.parametrize(("heads", "dtype", "T", "valid"), [
    ("tiny", torch.float32, 1, None), ("tiny", torch.float32, 2, None), ("tiny", torch.float32, 9, None),
    ("tiny", torch.float32, 12, 7), ("tiny", torch.float32, 6, 2), ("tiny", torch.bfloat16, 9, 5),
    ("full", torch.float32, 5, None), ("full", torch.bfloat16, 6, 4)])
def test_layer_matches_its_torch_path(package, monkeypatch, heads, dtype, T, valid):
    cfg = CFG.backbone if heads == "tiny" else FULL_HEADS
    layer, fresh, gen = _layer(package, cfg, dtype)
    x = torch.randn((T, cfg.hidden_size), generator=gen).to(dtype)
    positions = torch.arange(T)
    start = fresh()
    if valid is not None:
        start.valid = torch.tensor([valid])
    kernel, torch_path = (dataclasses.replace(start, conv=start.conv.clone(), recurrent=start.recurrent.clone())
                          for _ in range(2))
    got = layer(x, positions, kernel)
    with monkeypatch.context() as m:  # GatedDeltaNet takes the kernel path only under the interpreter flag
        m.delenv("TRITON_INTERPRET")
        want = layer(x, positions, torch_path)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(got, want, **tol)  # the rows past `valid` too: zeros both ways
    assert torch.equal(kernel.conv, torch_path.conv)  # copies of inputs: exact
    torch.testing.assert_close(kernel.recurrent, torch_path.recurrent, **tol)
    assert not torch.equal(kernel.recurrent, start.recurrent)


def test_compiled_prefill_keeps_the_reference_logits(package):
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), package.build_engine(CFG, weights, "cpu")
    prep, calls = importlib.import_module(f"{package.__name__}.deltanet_prep"), []
    kernel = prep.deltanet_prep
    prep.deltanet_prep = lambda *args: calls.append(args[0].shape[0]) or kernel(*args)
    try:
        request = bench_requests(CFG, 2)["hello"]
        rows, frames = build_rows(CFG, request, ref.tokenizer), ref.generate(request).frames
        counters.clear()
        got, want = teacher_forced(eng, rows, frames), teacher_forced(ref, rows, frames)
    finally:
        prep.deltanet_prep = kernel
    torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
    assert calls and set(calls) == {64}  # the prompt's 52 rows in their bucket, once per DeltaNet layer
    assert not counters["graph_break"]
