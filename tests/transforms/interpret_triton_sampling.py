"""triton_sampling on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1: it
applies only on top of cuda_graph_frame and commutes with the other CUDA transforms of the recipes; its kernels
hash NoiseTable's noise and draw what decode_sampling's torch draws draw (greedy and sampled, top-k with tied
logits, top-p keeping or dropping the crossing token, the RAS redraw, codes past the codec's codebook masked) at
drama3-tiny's and drama3's head widths; and the engine's teacher-forced logits and seeded generations are the
graph engine's. The compiled kernels at full size and their timing run in tests/gpu/."""
from __future__ import annotations

import importlib
import os
import random

import numpy as np
import pytest
import torch
from interpret_triton_moe_fused import _proposer_order
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_sampling import triton_sampling
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

triton = pytest.importorskip("triton")
tl = triton.language
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
KERNELS = None  # the loaded package's triton_sampling module
# (main width 1 + codebook_size, code head size, the codec's residual codebook size): drama3-tiny's and drama3's
WIDTHS = {"tiny": (65, 64, 32), "full": (4097, 4096, 1024)}
PARAMS = {
    "default": SamplingParams(),
    "greedy": SamplingParams(temperature=0, ras_temperature=0, code_temperature=0, top_k=3),
    "top_k_only": SamplingParams(top_k=5, top_p=1.0, ras_top_p=1.0, code_top_k=7, code_top_p=1.0),
    "narrow_nucleus": SamplingParams(temperature=0.5, top_p=0.3, ras_top_k=0, ras_top_p=0.5, code_top_k=0,
                                     code_top_p=0.3, code_temperature=0.7),
    "mixed": SamplingParams(temperature=1.3, top_k=30, top_p=0.95, ras_temperature=0, code_temperature=2.0,
                            code_top_k=12, code_top_p=0.99, ras_window=0),
}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(cuda_graph_frame alone: the torch draws, the package with triton_sampling)."""
    global KERNELS
    root, graph = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), [cuda_graph_frame])
    fast = load(transformed(graph, [triton_sampling]), root)
    KERNELS = importlib.import_module(f"{fast.__name__}.triton_sampling")
    return load(graph, root), fast


def test_applies_only_on_top_of_cuda_graph_frame():
    assert triton_sampling.requires == ("cuda_graph_frame",) and triton_sampling.devices == frozenset({"cuda"})
    graph = assert_applies_once_on_top_of(triton_sampling, [cuda_graph_frame])
    with pytest.raises(ValueError, match="power"):
        triton_sampling.apply(graph, next(triton_sampling.variants()) | {"main_warps": 6})


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    """With the recipes' CUDA transforms (graph_topk_sampling included) in any order the proposer could use, it
    gives the same sampler; placed anywhere after cuda_graph_frame in the recipes' order, the same package."""
    names = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
             "cuda_graph_prefill", "graph_topk_sampling", "inductor_decode_steps", "triton_moe_fused",
             "triton_sampling"]
    rng = random.Random(0)
    samplers = {transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])
                ["decode_sampling.py"] for _ in range(12)}
    assert len(samplers) == 1
    sampler = samplers.pop()
    assert "def race_top_k(" in sampler and sampler.count("if triton_draws(") == 3
    stack = [TRANSFORMS[n] for n in names[:-1]]
    packages = [transformed(engine_files(REFERENCE), stack[:i] + [triton_sampling] + stack[i:])
                for i in range(1, len(stack) + 1)]
    assert all(p == packages[0] for p in packages[1:])


@triton.jit
def _noise_kernel(slot_ptr, out_ptr, WIDTH: tl.constexpr):
    offs = tl.arange(0, WIDTH)
    tl.store(out_ptr + offs, KERNELS._noise(slot_ptr, offs, False))


def test_kernel_noise_is_the_noise_table(packages, monkeypatch):
    """The same hash of (seed, position, index) and float32 steps, bit for bit. The interpreter's log is NumPy's,
    which rounds apart from torch's CPU log on some inputs, so the table takes NumPy's here; on CUDA both use
    logf, and tests/gpu compares them as they are."""
    plain, fast = (p.decode_sampling for p in packages)
    table, handles = plain.NoiseTable(11, 128, "cpu"), fast.NoiseTable(11, 128, "cpu")
    monkeypatch.setattr(torch, "log", lambda t: torch.from_numpy(np.log(t.numpy())))
    for seed, pos in [(0, 0), (-1, 7), (2**62 + 12345, 999), (-(2**40), 2**20)]:
        seed, pos = torch.tensor([seed]), torch.tensor([pos])
        want, handle = table.draw(seed, pos), handles.draw(seed, pos)
        assert handle.shape == (11, 3) and handle.dtype == torch.long
        for slot in (0, 1, 10):
            got = torch.empty(128)
            _noise_kernel[(1,)](handle[slot], got, 128)
            assert torch.equal(got, want[slot])


def _logits(gen: torch.Generator, width: int, trial: int, ties: bool) -> torch.Tensor:
    """Flat, medium and peaked rows; with `ties` every fourth is quantised, tying at the k-th logit and the
    maximum (not under a nucleus: there torch's sort order picks which tied tokens stay, see triton_sampling.py)."""
    logits = torch.randn(width, generator=gen) * (0.3, 1.0, 4.0)[trial % 3]
    return torch.round(logits * 2) / 2 if ties and trial % 4 == 3 else logits


@pytest.mark.parametrize("size, trials", [("tiny", 12), ("full", 8)])
@pytest.mark.parametrize("case", sorted(PARAMS))
def test_draws_equal_the_torch_draws(packages, size, trials, case):
    plain, fast = (p.decode_sampling for p in packages)
    params, (width, head, valid) = PARAMS[case], WIDTHS[size]
    gen = torch.Generator().manual_seed(sorted(PARAMS).index(case) * 2 + (size == "full"))
    table, handles = plain.NoiseTable(11, max(width, head), "cpu"), fast.NoiseTable(11, max(width, head), "cpu")
    for trial in range(trials):
        seed, pos = torch.randint(-2**62, 2**62, (1,), generator=gen), torch.randint(0, 2**20, (1,), generator=gen)
        noise, handle = table.draw(seed, pos), handles.draw(seed, pos)
        ties = case in ("greedy", "top_k_only")
        logits = _logits(gen, width, trial, ties)
        recent = torch.full((params.ras_window,), -1)
        if trial % 2 and params.ras_window:  # a repeat of the first draw: the RAS draw replaces it
            first = plain.race(logits, params.temperature, params.top_p, params.top_k, True,
                                noise[plain.MAIN, :width])
            recent[trial % params.ras_window] = first
        want = plain.draw_main(logits, params, recent, noise)
        assert fast.draw_main(logits, params, recent, handle) == want, (trial, "main")
        for slot in range(plain.FIRST_CODE, 11, 3):
            code = _logits(gen, head, trial + slot, ties)
            for size_ in (valid, head):
                want = plain.draw_code(code, params, size_, noise[slot])
                got = fast.draw_code(code, params, size_, handle[slot])
                assert got == want and got.dtype == torch.long and got.shape == (), (trial, slot, size_)


def test_params_module_holds_the_first_variant(packages):
    _, fast = packages
    params = importlib.import_module(f"{fast.__name__}.triton_sampling_params")
    assert {"main_warps": params.MAIN_WARPS, "code_warps": params.CODE_WARPS} == next(triton_sampling.variants())


def test_engine_matches_the_graph_engine(packages, monkeypatch):
    """Teacher-forced logits match the reference with every draw through the kernels; seeded generations are
    the torch-drawing graph engine's, frame for frame."""
    plain, fast = packages
    calls = {"triton_draw_main": 0, "triton_draw_code": 0}
    for name in calls:
        original = getattr(KERNELS, name)
        monkeypatch.setattr(KERNELS, name, lambda *args, _f=original, _n=name: calls.__setitem__(_n, calls[_n] + 1)
                            or _f(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1))
    assert calls["triton_draw_main"] == len(frames) and calls["triton_draw_code"] == (CFG.num_codebooks - 1) * len(
        frames)
    sampling = SamplingParams(code_top_k=8, ras_top_k=8)  # tiny heads are 64 wide: keep top-k below that
    request = TTSRequest(text="Hello there", max_frames=10, ignore_eos=True, seed=5, sampling=sampling)
    torch_draws = plain.build_engine(CFG, weights, "cpu")
    assert torch.equal(eng.generate(request).frames, torch_draws.generate(request).frames)
