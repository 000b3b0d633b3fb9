"""triton_code_heads on CUDA at full drama3 dims: the kernel's codebook logits are the cuBLAS head GEMV's (a bf16
rounding step apart at most), its codes are triton_sampling's draws of those logits and its next embedding is the
table's row; a frame's nine code steps replayed as a CUDA graph take less time than the chain they replace (head
GEMV, cast, draw, select, embedding lookup, scaling); engines with it pass the teacher-forced gate at drama3-tiny
and drama3-mid and generate what the engine without it generates."""
from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from gpu_engines import SAMPLING_STACK, assert_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
CFG = get_config("drama3")
HIDDEN, HEAD, VALID = CFG.hidden_size, CFG.tower.head_size, CFG.codec.residual_codebook_size
CODES = CFG.num_codebooks - 1
STACK = SAMPLING_STACK + ["triton_tower"]


@pytest.fixture(scope="module")
def package(load_package):
    return load_package([(TRANSFORMS[name], {}) for name in STACK + ["triton_code_heads"]])


def _inputs(gen: torch.Generator):
    x = torch.randn((1, HIDDEN), generator=gen, device="cuda").bfloat16()
    heads = [(torch.randn((HEAD, HIDDEN), generator=gen, device="cuda") * HIDDEN ** -0.5).bfloat16()
             for _ in range(CODES)]
    tables = [torch.randn((VALID, HIDDEN), generator=gen, device="cuda").bfloat16() for _ in range(CODES)]
    return x, heads, tables


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(code_temperature=0),
                                    SamplingParams(code_top_k=0, code_top_p=0.5, code_temperature=0.7)],
                         ids=["default", "greedy", "nucleus"])
def test_kernel_at_full_size(package, params):
    kernels = importlib.import_module(f"{package.__name__}.code_heads")
    sampling = importlib.import_module(f"{package.__name__}.triton_sampling")
    noise = package.decode_sampling.NoiseTable(2 + CODES, HEAD, "cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, heads, tables = _inputs(gen)
    logits = torch.zeros((CODES, HEAD), device="cuda")
    chain = kernels.CodeHeads(heads, VALID, logits)
    use, scale = torch.tensor([False], device="cuda"), torch.tensor(1.0, device="cuda").bfloat16()
    force = torch.tensor(3, device="cuda")
    for trial in range(20):
        slot = noise.draw(torch.tensor([trial], device="cuda"), torch.tensor([trial * 31], device="cuda"))[2]
        k = 1 + trial % CODES
        code = chain.draw(k, x, params, slot, use, force, scale, tables[k % CODES])
        torch.testing.assert_close(logits[k - 1, :VALID], F.linear(x, heads[k - 1][:VALID]).float()[0],
                                   atol=0.02, rtol=0.01)
        assert torch.isneginf(logits[k - 1, VALID:]).all()
        assert int(code) == int(sampling.triton_draw_code(logits[k - 1].clone(), params, VALID, slot))
        assert torch.equal(chain.e[0], tables[k % CODES][int(code)])
        x = chain.e.clone()


def test_a_frames_code_steps_take_less_time_than_the_chain_they_replace(package):
    kernels = importlib.import_module(f"{package.__name__}.code_heads")
    sampling = importlib.import_module(f"{package.__name__}.triton_sampling")
    params, gen = SamplingParams(), torch.Generator(device="cuda").manual_seed(0)
    x, heads, tables = _inputs(gen)
    handles = package.decode_sampling.NoiseTable(2 + CODES, HEAD, "cuda").draw(
        torch.tensor([5], device="cuda"), torch.tensor([100], device="cuda"))
    use, force = torch.tensor([False], device="cuda"), torch.zeros(1 + CODES + 1, dtype=torch.long, device="cuda")
    scale = torch.tensor(1.0, device="cuda").bfloat16()
    chain = kernels.CodeHeads(heads, VALID, torch.zeros((CODES, HEAD), device="cuda"))

    def torch_chain() -> None:
        logits = []
        for k in range(1, CODES + 1):
            logits.append(F.linear(x, heads[k - 1]).float()[0])
            drawn = sampling.triton_draw_code(logits[-1], params, VALID, handles[1 + k])
            code = torch.where(use[0], force[1 + k], drawn)
            F.embedding(code[None], tables[k % CODES]) * scale
        torch.stack(logits)

    def fused() -> None:
        for k in range(1, CODES + 1):
            chain.draw(k, x, params, handles[1 + k], use, force[1 + k], scale, tables[k % CODES])

    times = {"chain": graph_ms(torch_chain), "triton_code_heads": graph_ms(fused)}
    print(f"nine code steps per frame (ms): {times}")
    assert times["triton_code_heads"] < times["chain"], times


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(package, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device="cuda")
    assert_passes_gate(config, build_engine(config, weights, "cuda"), package.build_engine(config, weights, "cuda"))


def test_seeded_generation_is_the_engines_without_it(load_package, package):
    """Same seed, same frames (a near-tie flip between the cuBLAS and the kernel's logits would show here as a
    different frame: unlikely over ~300 draws, not impossible)."""
    config, device = get_config("drama3-tiny"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    plain = load_package([(TRANSFORMS[name], {}) for name in STACK]).build_engine(config, weights, device)
    request = TTSRequest(text="Hello there", max_frames=32, ignore_eos=True, seed=5,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8))  # tiny heads are 64 wide
    fast = package.build_engine(config, weights, device)
    assert torch.equal(fast.generate(request).frames, plain.generate(request).frames)
