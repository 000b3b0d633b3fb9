"""triton_code_heads on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1: it
applies only on top of cuda_graph_frame, triton_tower and triton_sampling, and commutes with the other CUDA
transforms; its kernel writes the head GEMV's codebook logits (as `F.linear(...).float()`, -inf past the codebook),
draws what triton_sampling's code draw draws from those logits, takes the forced code where the frame is forced,
and writes the next layer's code embedding, at drama3-tiny's and drama3's head dims; the engine's teacher-forced
logits match the reference within the codebook and its seeded generations are the engine's without it. Compiled kernels and timing
run in tests/gpu/."""
from __future__ import annotations

import importlib
import os
import random

import pytest
import torch
import torch.nn.functional as F
from interpret_triton_moe_fused import _proposer_order
from interpret_triton_tower import cuda_like_bf16  # noqa: F401 (an autouse fixture: bf16 as on CUDA)
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, load, transformed, use_torch_tower_layers

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_code_heads import triton_code_heads
from knowledge_base.transforms.triton_sampling import triton_sampling
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
PREREQUISITES = [cuda_graph_frame, triton_tower, triton_sampling]
# (hidden, head rows, the codec's residual codebook, dtype): drama3-tiny's (float32 as its weights) and drama3's
DIMS = {"tiny": (CFG.hidden_size, CFG.tower.head_size, CFG.codec.residual_codebook_size, torch.float32),
        "full": (2048, 4096, 1024, torch.bfloat16)}
PARAMS = {
    "default": SamplingParams(),
    "greedy": SamplingParams(code_temperature=0),
    "nucleus": SamplingParams(code_top_k=0, code_top_p=0.3, code_temperature=0.7),
    "top_k": SamplingParams(code_top_k=12, code_top_p=1.0, code_temperature=2.0),
}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(the prerequisites alone, with triton_code_heads)."""
    root, base = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), PREREQUISITES)
    return load(base, root), load(transformed(base, [triton_code_heads]), root)


def test_applies_only_on_top_of_its_prerequisites_and_once():
    assert triton_code_heads.requires == ("cuda_graph_frame", "triton_tower", "triton_sampling")
    assert triton_code_heads.devices == frozenset({"cuda"}) and triton_code_heads.lesson
    base = assert_applies_once_on_top_of(triton_code_heads, PREREQUISITES)
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame, triton_tower])
    with pytest.raises(NotApplicable, match="apply triton_sampling first"):
        triton_code_heads.apply(graph, next(triton_code_heads.variants()))
    with pytest.raises(ValueError, match="power of two"):
        triton_code_heads.apply(base, next(triton_code_heads.variants()) | {"block_k": 384})
    stale = base | {"triton_sampling.py": base["triton_sampling.py"] + "\n# a kernel file older than today's\n"}
    with pytest.raises(NotApplicable, match="renew triton_sampling first"):  # a lineage kept before today's race
        triton_code_heads.apply(stale, next(triton_code_heads.variants()))


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    """In any order the proposer could use with the kept lineage's decode transforms, the same predict step."""
    names = ["cuda_graph_frame", "cuda_graph_codec", "graph_topk_sampling", "inductor_decode_steps",
             "triton_fp8_moe", "triton_moe_fused", "triton_sampling", "triton_tower", "triton_backbone_attention",
             "triton_backbone_deltanet", "triton_moe_block", "triton_code_heads"]
    rng = random.Random(0)
    steps = {transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])
             ["decode_step.py"] for _ in range(12)}
    assert len(steps) == 1
    assert steps.pop().count("chain is not None") == 2


def _case(size: str, seed: int):
    hidden, head_rows, valid, dtype = DIMS[size]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((1, hidden), generator=gen).to(dtype)
    head = (torch.randn((head_rows, hidden), generator=gen) * hidden ** -0.5 * (1.0, 4.0)[seed % 2]).to(dtype)
    table = torch.randn((valid, hidden), generator=gen).to(dtype)
    return x, head, table, valid


@pytest.mark.parametrize("forced", [False, True], ids=["drawn", "forced"])
@pytest.mark.parametrize("case", sorted(PARAMS))
@pytest.mark.parametrize("size", sorted(DIMS))
def test_kernel_is_the_head_gemv_the_code_draw_and_the_next_embedding(packages, size, case, forced):
    _, fast = packages
    kernels = importlib.import_module(f"{fast.__name__}.code_heads")
    sampling = importlib.import_module(f"{fast.__name__}.triton_sampling")
    table_noise = importlib.import_module(f"{fast.__name__}.decode_sampling").NoiseTable(11, 64, "cpu")
    for trial in range(2):
        x, head, table, valid = _case(size, sorted(PARAMS).index(case) * 4 + trial)
        logits = torch.zeros((2, head.shape[0]))
        chain = kernels.CodeHeads([head, head], valid, logits)
        slot = table_noise.draw(torch.tensor([trial * 7919 - 3]), torch.tensor([trial + 11]))[3]
        use, force = torch.tensor([forced]), torch.tensor(valid - 1 - trial)
        for scale in (torch.tensor(1.0, dtype=x.dtype), torch.tensor(0.0, dtype=x.dtype)):
            code = chain.draw(2, x, PARAMS[case], slot, use, force, scale, table)
            want = F.linear(x, head[:valid]).float()[0]
            tol = 1e-5 if x.dtype == torch.float32 else 1e-2  # bf16: a rounding step apart (fp32 sums in another order)
            torch.testing.assert_close(logits[1, :valid], want, atol=tol, rtol=tol)
            assert torch.isneginf(logits[1, valid:]).all() and torch.isneginf(logits[0, valid:]).all()
            drawn = sampling.triton_draw_code(logits[1].clone(), PARAMS[case], valid, slot)
            assert int(code) == (int(force) if forced else int(drawn)) and code.data_ptr() == chain.codes[1].data_ptr()
            assert torch.equal(chain.e[0], table[int(code)] * scale)
            assert int(chain.ticket) == 0  # the last program put it back for the next launch
        chain.e.fill_(7)
        chain.draw(1, x, PARAMS[case], slot, use, force, scale, None)
        assert (chain.e == 7).all()  # no next layer: nothing written


def test_params_module_holds_the_first_variant(packages):
    _, fast = packages
    params = importlib.import_module(f"{fast.__name__}.code_heads_params")
    assert {"block_n": params.BLOCK_N, "block_k": params.BLOCK_K, "num_warps": params.NUM_WARPS} == \
        next(triton_code_heads.variants())


def test_engine_matches_the_reference_and_draws_as_without_it(packages, tmp_path, monkeypatch):
    base, fast = packages
    use_torch_tower_layers(packages, tmp_path, monkeypatch.setattr)
    kernels = importlib.import_module(f"{fast.__name__}.code_heads")
    original, calls = kernels._head_draw_kernel, []

    class Counting:
        def __getitem__(self, grid):
            calls.append(grid)
            return original[grid]

    monkeypatch.setattr(kernels, "_head_draw_kernel", Counting())
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    request = TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1)
    frames = ref.generate(request).frames
    rows = build_rows(CFG, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    valid = CFG.codec.residual_codebook_size
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes[..., :valid], want.codes[..., :valid], atol=1e-4, rtol=1e-4)
    assert torch.isneginf(got.codes[..., valid:]).all()  # never drawn: the codec has no such codes
    assert len(calls) == (CFG.num_codebooks - 1) * len(frames)
    sampling = SamplingParams(code_top_k=8, ras_top_k=8)  # tiny heads are 64 wide: keep top-k below that
    request = TTSRequest(text="Hello there", max_frames=6, ignore_eos=True, seed=5, sampling=sampling)
    assert torch.equal(eng.generate(request).frames, base.build_engine(CFG, weights, "cpu").generate(request).frames)
