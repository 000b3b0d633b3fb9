"""Every knowledge-base transform, applied through the strict edit path to a copy of the reference engine:
the package still imports, teacher-forced logits stay within 1e-4 of the reference, seeded free-running
frames are unchanged, and the CPU transforms are faster on a micro timing of the code they rewrite."""
from __future__ import annotations

import importlib
import time

import pytest
import torch
import torch.nn.functional as F
from engine_copies import CPU, REQUEST, TINY, transformed, with_prerequisites
from torch.nn.attention import SDPBackend

import reference_runtime.model as reference_model
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from reference_runtime.teacher_forcing import teacher_forced

# The whole-frame CUDA graph and Triton transforms have their own tests (tests/transforms/, tests/gpu/).
OURS = ["fp8_dequant_at_build", "moe_dispatch", "rope_tables", "gqa_sdpa", "fused_sdpa", "static_caches",
        "deltanet_conv_unfold", "topk_first_sampling", "cuda_graph_backbone", "compile_tower"]
VARIANTS = [pytest.param(name, params, id=TRANSFORMS[name].label(params))
            for name in OURS for params in TRANSFORMS[name].variants()]


@pytest.mark.parametrize("name, params", VARIANTS)
def test_transform_keeps_teacher_forced_logits_and_seeded_frames(name, params, reference_run, load_package):
    files = transformed(reference_run.files, *with_prerequisites(name, params))
    assert files != reference_run.files
    engine = load_package(files).build_engine(TINY, reference_run.weights, CPU)
    logits = teacher_forced(engine, reference_run.rows, reference_run.frames)
    torch.testing.assert_close(logits.main, reference_run.logits.main, atol=1e-4, rtol=0)
    torch.testing.assert_close(logits.codes, reference_run.logits.codes, atol=1e-4, rtol=0)
    assert torch.equal(engine.generate(REQUEST).frames, reference_run.frames)
    assert torch.equal(engine.generate(REQUEST).frames, reference_run.frames)  # state reset between requests


def test_transform_refuses_code_that_is_not_there(reference_run):
    files = transformed(reference_run.files, ("fp8_dequant_at_build", {}))
    with pytest.raises(NotApplicable):
        TRANSFORMS["fp8_dequant_at_build"].apply(files, {})
    with pytest.raises(NotApplicable):
        TRANSFORMS["moe_dispatch"].apply(reference_run.files, {"strategy": "gather", "max_tokens": 1})


@pytest.mark.parametrize("first, second", [("static_caches", "cuda_graph_backbone"),
                                           ("cuda_graph_backbone", "rope_tables")])
def test_transforms_stack(first, second, reference_run, load_package):
    steps = with_prerequisites(first, next(TRANSFORMS[first].variants()))
    steps += [s for s in with_prerequisites(second, next(TRANSFORMS[second].variants())) if s not in steps]
    engine = load_package(transformed(reference_run.files, *steps)).build_engine(TINY, reference_run.weights, CPU)
    assert torch.equal(engine.generate(REQUEST).frames, reference_run.frames)


# ---- micro timings: the rewritten code against the reference's, interleaved, best of many runs


def best_seconds(fn_a, fn_b, samples: int = 40, calls: int = 20) -> tuple[float, float]:
    """Minimum per-call time of each function, alternating samples so machine load hits both alike."""
    best = [float("inf"), float("inf")]
    for _ in range(samples):
        for i, fn in enumerate((fn_a, fn_b)):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return best[0], best[1]


@pytest.fixture(scope="module")
def engines(reference_run, load_package):
    def build(*steps):
        files = transformed(reference_run.files, *steps)
        return load_package(files).build_engine(TINY, reference_run.weights, CPU)
    return build


def moe_call(engine, x):
    return lambda: engine.model.backbone.layers[0].moe(x)


@pytest.mark.parametrize("steps", [
    [("fp8_dequant_at_build", {})],
    [("fp8_dequant_at_build", {}), ("moe_dispatch", {"strategy": "gather", "max_tokens": 1})],
    [("fp8_dequant_at_build", {}), ("moe_dispatch", {"strategy": "dense", "max_tokens": 1})],
], ids=["dequant_at_build", "dispatch_gather", "dispatch_dense"])
@torch.inference_mode()
def test_moe_transforms_are_faster(steps, engines):
    x = torch.randn(1, TINY.hidden_size)
    before, after = best_seconds(moe_call(engines(*steps[:-1]), x), moe_call(engines(*steps), x))
    assert after < before, f"{steps[-1][0]}: {after * 1e6:.1f} us per MoE call vs {before * 1e6:.1f} us"


def module(engine, name: str):
    """The engine package's own module `name` (e.g. "layers"), for timing a function it defines."""
    return importlib.import_module(f"{type(engine).__module__.rsplit('.', 1)[0]}.{name}")


@torch.inference_mode()
def test_rope_tables_are_faster(engines):
    x, positions = torch.randn(1, 4, 16), torch.tensor([37])
    ref, fast = (module(e, "layers") for e in (engines(), engines(("rope_tables", {"table_rows": 16384}))))
    before, after = best_seconds(lambda: ref.apply_rope(x, positions, 8, 1e7, True),
                                 lambda: fast.apply_rope(x, positions, 8, 1e7, True))
    assert after < before, f"apply_rope {after * 1e6:.1f} us vs {before * 1e6:.1f} us"


def decode_attention(engine, x):
    """One new row attending to a 100-row cache of the first tower layer (the cache is rewound each call)."""
    attn = engine.model.tower.layers[0].self_attn
    cache = module(engine, "kv_cache").KVCache()
    attn(torch.randn(100, TINY.hidden_size), torch.arange(100), cache)
    position = torch.tensor([100])

    def call():
        cache.length = 100
        return attn(x, position, cache)
    return call


@torch.inference_mode()
def test_gqa_sdpa_is_faster(engines):
    x = torch.randn(1, TINY.hidden_size)
    before, after = best_seconds(decode_attention(engines(), x), decode_attention(engines(("gqa_sdpa", {})), x))
    assert after < before, f"gqa_sdpa: {after * 1e6:.1f} us per decode attention vs {before * 1e6:.1f} us"


@torch.inference_mode()
def test_fused_sdpa_reaches_a_fused_kernel(engines, monkeypatch):
    """The backend SDPA picks for a prompt's attention call (a fresh cache: a causal mask, or with gqa_sdpa none):
    the math kernel for the engine's 3-D inputs, a fused one (flash on CPU too) once fused_sdpa adds the batch
    dim."""
    sdpa, picked = F.scaled_dot_product_attention, []

    def recording(*args, **kwargs):
        picked.append(torch._fused_sdp_choice(*args, **kwargs))
        return sdpa(*args, **kwargs)
    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    x, positions = torch.randn(12, TINY.hidden_size), torch.arange(12)
    gqa, fused = ("gqa_sdpa", {}), ("fused_sdpa", {})
    for steps, math in (([], True), ([fused], False), ([gqa], True), ([gqa, fused], False)):
        engine, picked[:] = engines(*steps), []
        engine.model.tower.layers[0].self_attn(x, positions, module(engine, "kv_cache").KVCache())
        assert picked and all((p == int(SDPBackend.MATH)) == math for p in picked), (steps, picked)


@torch.inference_mode()
def test_topk_first_sampling_is_faster_on_a_full_size_head(engines):
    # drama3's code heads are 4096 wide: the reference sorts all of them for a top-30 draw.
    logits = torch.randn(1, 4096)
    ref, fast = (module(e, "sampling") for e in (engines(), engines(("topk_first_sampling", {}))))
    gen = torch.Generator().manual_seed(0)
    before, after = best_seconds(lambda: ref.sample(logits, 1.0, 0.9, 30, False, gen),
                                 lambda: fast.sample(logits, 1.0, 0.9, 30, False, gen))
    assert after < before, f"sample {after * 1e6:.1f} us vs {before * 1e6:.1f} us"


@torch.inference_mode()
def test_deltanet_conv_unfold_is_faster(engines):
    x = torch.randn(1, TINY.hidden_size)
    calls = []
    for engine in (engines(), engines(("deltanet_conv_unfold", {}))):
        mixer = engine.model.backbone.layers[0].mixer
        state = mixer.new_state(x.dtype, CPU)
        calls.append(lambda mixer=mixer, state=state: mixer(x, None, state))
    before, after = best_seconds(*calls)
    assert after < before, f"deltanet decode step {after * 1e6:.1f} us vs {before * 1e6:.1f} us"


@pytest.mark.gpu
@pytest.mark.parametrize("name, params", [v for v in VARIANTS if "cuda" in TRANSFORMS[v.values[0]].devices])
def test_transform_on_cuda_keeps_teacher_forced_logits(name, params, reference_run, load_package):
    # On CUDA the graph capture and torch.compile paths run; compare with the reference on the same device.
    cuda = torch.device("cuda")
    weights = {k: v.to(cuda) for k, v in reference_run.weights.items()}
    reference = reference_model.build_engine(TINY, weights, cuda)
    expected = teacher_forced(reference, reference_run.rows, reference_run.frames)
    engine = load_package(transformed(reference_run.files, *with_prerequisites(name, params))).build_engine(
        TINY, weights, cuda)
    for _ in range(2):  # the second pass replays what the first captured or compiled
        logits = teacher_forced(engine, reference_run.rows, reference_run.frames)
        torch.testing.assert_close(logits.main, expected.main, atol=1e-4, rtol=0)
        torch.testing.assert_close(logits.codes, expected.codes, atol=1e-4, rtol=0)
