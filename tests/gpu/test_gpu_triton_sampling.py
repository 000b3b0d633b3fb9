"""triton_sampling on CUDA: the kernels' noise is NoiseTable's bit for bit (both take CUDA's logf), their draws are
decode_sampling's torch draws at the full model's head widths (but for float32 near-ties: a handful in thousands
at most), one frame's eleven draws replayed as a CUDA graph take less time than the torch draws' (with and
without graph_topk_sampling), and engines with the kernels pass the teacher-forced gate at drama3-tiny and
drama3-mid and generate what the torch-drawing graph engine generates."""
from __future__ import annotations

import importlib

import pytest
import torch
from gpu_engines import SAMPLING_STACK, assert_passes_gate, config_named

from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.sampling import graph_topk_sampling
from knowledge_base.transforms.triton_sampling import triton_sampling
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton")
tl = triton.language
CFG = get_config("drama3")
WIDTH, HEAD, VALID = 1 + CFG.codebook_size, CFG.tower.head_size, CFG.codec.residual_codebook_size
SLOTS = 2 + CFG.num_codebooks - 1  # the graph engine's noise slots: main, RAS, one per residual code
PARAMS = [SamplingParams(), SamplingParams(temperature=0, ras_temperature=0, code_temperature=0),
          SamplingParams(temperature=0.7, top_k=30, top_p=1.0, code_top_k=0, code_top_p=0.5),
          SamplingParams(temperature=1.2, top_p=0.3, ras_top_k=0, code_top_k=5, code_top_p=0.99)]
KERNELS = None  # the triton_sampling module of the noise test's package


@pytest.fixture(scope="module")
def samplers(load_package):
    """decode_sampling of (cuda_graph_frame, + graph_topk_sampling, + triton_sampling)."""
    global KERNELS
    fast = load_package([(cuda_graph_frame, {}), (triton_sampling, {})])
    KERNELS = importlib.import_module(f"{fast.__name__}.triton_sampling")
    return (load_package([(cuda_graph_frame, {})]).decode_sampling,
            load_package([(cuda_graph_frame, {}), (graph_topk_sampling, {})]).decode_sampling, fast.decode_sampling)


@triton.jit
def _noise_kernel(slot_ptr, out_ptr, WIDTH: tl.constexpr):
    offs = tl.arange(0, WIDTH)
    tl.store(out_ptr + offs, KERNELS._noise(slot_ptr, offs, True))


def test_kernel_noise_is_bitwise_the_noise_table(samplers):
    plain, _, fast = samplers
    table, handles = plain.NoiseTable(SLOTS, 4096, "cuda"), fast.NoiseTable(SLOTS, 4096, "cuda")
    for seed, pos in [(0, 0), (-1, 7), (2**62 + 12345, 999), (123, 2**20)]:
        seed, pos = torch.tensor([seed], device="cuda"), torch.tensor([pos], device="cuda")
        want, handle = table.draw(seed, pos), handles.draw(seed, pos)
        for slot in range(SLOTS):
            got = torch.empty(4096, device="cuda")
            _noise_kernel[(1,)](handle[slot], got, 4096)
            assert torch.equal(got, want[slot]), (seed, pos, slot)


@pytest.mark.parametrize("params", PARAMS, ids=range(len(PARAMS)))
def test_draws_equal_the_torch_draws_at_full_size(samplers, params):
    plain, _, fast = samplers
    table, handles = plain.NoiseTable(SLOTS, WIDTH, "cuda"), fast.NoiseTable(SLOTS, WIDTH, "cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    draws = differ = 0
    for trial in range(100):
        seed = torch.randint(-2**62, 2**62, (1,), generator=gen, device="cuda")
        pos = torch.randint(0, 2**20, (1,), generator=gen, device="cuda")
        noise, handle = table.draw(seed, pos), handles.draw(seed, pos)
        scale = (0.3, 1.0, 4.0)[trial % 3]
        logits = torch.randn(WIDTH, generator=gen, device="cuda") * scale
        recent = torch.full((params.ras_window,), -1, device="cuda")
        if trial % 2:  # a repeat of the first draw: the RAS draw replaces it
            recent[3] = plain.race(logits, params.temperature, params.top_p, params.top_k, True, noise[0, :WIDTH])
        pairs = [(plain.draw_main(logits, params, recent, noise), fast.draw_main(logits, params, recent, handle))]
        for slot in range(2, SLOTS):
            code = torch.randn(HEAD, generator=gen, device="cuda") * scale
            pairs.append((plain.draw_code(code, params, VALID, noise[slot]),
                          fast.draw_code(code, params, VALID, handle[slot])))
        draws += len(pairs)
        differ += sum(int(want != got) for want, got in pairs)
        assert all(0 <= got < VALID for _, got in pairs[1:])
    # CUDA's exp and division in the kernel round apart from torch's kernels: only near-ties may flip
    assert differ <= draws // 500, f"{differ} of {draws} draws differ"


def test_a_frames_draws_take_less_time_than_the_torch_draws(samplers):
    """The sampling stage of a frame: noise, the main draw (both races) and the nine code draws."""
    params, gen = SamplingParams(), torch.Generator(device="cuda").manual_seed(0)
    main = torch.randn(WIDTH, generator=gen, device="cuda")
    codes = torch.randn(SLOTS - 2, HEAD, generator=gen, device="cuda")
    recent = torch.full((params.ras_window,), -1, device="cuda")
    seed, pos = torch.tensor([5], device="cuda"), torch.tensor([100], device="cuda")
    times = {}
    for name, sampler in zip(("torch", "torch_topk", "triton"), samplers):
        table = sampler.NoiseTable(SLOTS, WIDTH, "cuda")

        def step(s=sampler, t=table) -> None:
            noise = t.draw(seed, pos)
            s.draw_main(main, params, recent, noise)
            for k in range(SLOTS - 2):
                s.draw_code(codes[k], params, VALID, noise[2 + k])
        times[name] = graph_ms(step)
    print(f"sampling stage per frame (ms): {times}")
    assert times["triton"] < min(times["torch"], times["torch_topk"]), times


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("names", [["cuda_graph_frame", "triton_sampling"], SAMPLING_STACK], ids=["minimal", "fast"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, names):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device="cuda")
    eng = load_package([(TRANSFORMS[name], {}) for name in names]).build_engine(config, weights, "cuda")
    assert_passes_gate(config, build_engine(config, weights, "cuda"), eng)


def test_seeded_generation_is_the_graph_engines(load_package):
    """Same seed, same frames as the torch-drawing graph engine (a near-tie flip would show up here as a
    different frame: with ~350 draws it is unlikely, not impossible)."""
    config, device = get_config("drama3-tiny"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    plain = load_package([(cuda_graph_frame, {})]).build_engine(config, weights, device)
    fast = load_package([(cuda_graph_frame, {}), (triton_sampling, {})]).build_engine(config, weights, device)
    request = TTSRequest(text="Hello there", max_frames=32, ignore_eos=True, seed=5,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8))  # tiny heads are 64 wide
    assert torch.equal(fast.generate(request).frames, plain.generate(request).frames)
