"""triton_backbone_attention on CUDA (compiled kernels, bf16): at the full model's backbone attention dims
(drama3-mid has them) the attention mixer through the kernels matches the torch mixer at short and long spans and
writes the same cache row; engines with it pass the teacher-forced gate at drama3-tiny and drama3-mid; and the time
of one frame's 10 attention mixers (the full model's count) in a CUDA graph is printed against the torch mixer's,
plain and inductor-compiled (the kernels beside inductor too, as in the fast stacks)."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import (
    assert_bf16_close,
    assert_passes_gate,
    config_named,
    kv_caches,
    mid_config,
    mixer_packages,
)

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.bench import graph_ms
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
DEVICE = torch.device("cuda")
NAMES = ["cuda_graph_frame", "triton_tower", "triton_backbone_attention"]
FULL_MODEL_ATTENTION_LAYERS = 10
# (span bucket, position): the first row, a bucket's last row, mid-bucket, the longest context
CASES = [(256, 0), (256, 255), (1024, 700), (4096, 4095)]


@pytest.fixture(scope="module")
def mixers(load_package):
    """({"torch", "inductor", "triton", "triton_inductor"}: decode_step modules, the attention layers' weights,
    geometry, rope, the kernel package's StaticKVCache (with the tickets the kernels need; the torch mixers ignore
    them))."""
    config = mid_config()
    weights = init_weights(config, seed=0, device=DEVICE)
    packages = mixer_packages(load_package, NAMES)
    graph = packages["torch"]
    layers = [lw for lw in graph.decode_weights.decode_weights(weights, config, DEVICE, fuse=True).layers
              if isinstance(lw.mixer, graph.decode_weights.AttnWeights)]
    b = config.backbone
    geo = graph.attention.AttentionGeometry(b.num_attention_heads, b.num_key_value_heads, b.head_dim, b.rotary_dim,
                                            b.rope_theta, interleaved_rope=False, eps=b.rms_norm_eps)
    rope = graph.decode_ops.RopeTable(config.max_context_rows, b.rotary_dim, b.rope_theta, DEVICE)
    steps = {name: pkg.decode_step for name, pkg in packages.items()}
    return steps, layers, geo, rope, packages["triton"].static_state.StaticKVCache


def test_mixer_matches_the_torch_mixer(mixers):
    steps, layers, geo, rope, cache_type = mixers
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    for span, p in CASES:
        want_cache, *got_caches = kv_caches(cache_type, geo, gen, 3)
        x, moe_out = (torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
        pos, future = torch.tensor([p], device=DEVICE), torch.arange(span, device=DEVICE) > p
        want = steps["torch"].attention_mixer(x, moe_out, layers[0], geo, want_cache, pos, future, rope)
        for name, got_cache in zip(("triton", "triton_inductor"), got_caches):
            got = steps[name].attention_mixer(x, moe_out, layers[0], geo, got_cache, pos, future, rope)
            for g, w in zip(got, want):
                assert_bf16_close(g, w)
            assert torch.equal(got_cache.keys[:p], want_cache.keys[:p])  # rows before pos untouched
            assert_bf16_close(got_cache.keys[p], want_cache.keys[p])
            assert_bf16_close(got_cache.values[p], want_cache.values[p])
            assert not got_cache.tickets.any()


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device=DEVICE)
    eng = load_package([(TRANSFORMS[name], {}) for name in NAMES]).build_engine(config, weights, DEVICE)
    assert_passes_gate(config, build_engine(config, weights, DEVICE), eng)


def test_attention_mixer_timing(mixers):
    """One frame's 10 attention mixers at row 700 of a 1024-row bucket (drama3-mid's attention layers, repeated,
    each with a cache of its own), each path captured as a CUDA graph. Prints ms per frame and the ratios; asserts
    only that the outputs agree."""
    steps, layers, geo, rope, cache_type = mixers
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    caches = kv_caches(cache_type, geo, gen, FULL_MODEL_ATTENTION_LAYERS)
    chosen = [layers[i % len(layers)] for i in range(FULL_MODEL_ATTENTION_LAYERS)]
    x0, moe_out = (torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
    pos, future = torch.tensor([700], device=DEVICE), torch.arange(1024, device=DEVICE) > 700
    outs, times = {}, {}
    for name, step in steps.items():
        def frame(mixer=step.attention_mixer, name=name) -> None:
            x = x0
            for lw, cache in zip(chosen, caches):
                x, h = mixer(x, moe_out, lw, geo, cache, pos, future, rope)
            outs[name] = h
        times[name] = graph_ms(frame)
    print(f"backbone attention mixers per frame ({FULL_MODEL_ATTENTION_LAYERS} layers, ms): {times}; triton vs "
          f"torch {times['torch'] / times['triton']:.2f}x, triton_inductor vs inductor "
          f"{times['inductor'] / times['triton_inductor']:.2f}x")
    for name in ("triton", "triton_inductor"):
        assert_bf16_close(outs[name], outs["torch"], tol=5e-2)
