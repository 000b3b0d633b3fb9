"""triton_backbone_deltanet on CUDA (compiled kernels, bf16): at the full model's Gated DeltaNet dims (drama3-mid
has them) the DeltaNet mixer through the kernels matches the torch mixer over several steps, outputs and both
states; engines with it pass the teacher-forced gate at drama3-tiny and drama3-mid; and the time of one frame's
30 DeltaNet mixers (the full model's count) in a CUDA graph is printed against the torch mixer's, plain and
inductor-compiled (the kernels beside inductor too, as in the fast stacks)."""
from __future__ import annotations

import pytest
import torch
from gpu_engines import assert_bf16_close, assert_passes_gate, config_named, mid_config, mixer_packages

from knowledge_base.transforms import TRANSFORMS
from reference_runtime.bench import graph_ms
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
DEVICE = torch.device("cuda")
NAMES = ["cuda_graph_frame", "triton_tower", "triton_backbone_deltanet"]
FULL_MODEL_DELTANET_LAYERS = 30


@pytest.fixture(scope="module")
def mixers(load_package):
    """({"torch", "inductor", "triton", "triton_inductor"}: decode_step modules, the DeltaNet layers' weights,
    the backbone config, the package's DeltaNetState)."""
    config = mid_config()
    weights = init_weights(config, seed=0, device=DEVICE)
    packages = mixer_packages(load_package, NAMES)
    graph = packages["torch"]
    layers = [lw for lw in graph.decode_weights.decode_weights(weights, config, DEVICE, fuse=True).layers
              if isinstance(lw.mixer, graph.decode_weights.DeltaNetWeights)]
    steps = {name: pkg.decode_step for name, pkg in packages.items()}
    return steps, layers, config.backbone, graph.kv_cache.DeltaNetState


def _states(state_type, cfg, gen: torch.Generator, count: int) -> list:
    """`count` DeltaNet states holding the same random conv window and recurrent state."""
    conv = torch.randn(cfg.linear_conv_kernel - 1, 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim
                       + cfg.linear_num_value_heads * cfg.linear_value_head_dim, generator=gen, device=DEVICE)
    recurrent = torch.randn(cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim,
                            generator=gen, device=DEVICE) * 0.05
    return [state_type(conv.bfloat16(), recurrent.clone()) for _ in range(count)]


def test_mixer_matches_the_torch_mixer_step_by_step(mixers):
    steps, layers, cfg, state_type = mixers
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    want_state, *got_states = _states(state_type, cfg, gen, 3)
    for step in range(4):
        x, moe_out = (torch.randn(1, cfg.hidden_size, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
        want = steps["torch"].deltanet_mixer(x, moe_out, layers[0], cfg, want_state)
        for name, got_state in zip(("triton", "triton_inductor"), got_states):
            got = steps[name].deltanet_mixer(x, moe_out, layers[0], cfg, got_state)
            for g, w in zip(got, want):
                assert_bf16_close(g, w)
            assert_bf16_close(got_state.conv, want_state.conv)
            torch.testing.assert_close(got_state.recurrent, want_state.recurrent, atol=2e-2, rtol=2e-2,
                                       msg=lambda m, name=name, step=step: f"{name} step {step}: {m}")


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device=DEVICE)
    eng = load_package([(TRANSFORMS[name], {}) for name in NAMES]).build_engine(config, weights, DEVICE)
    assert_passes_gate(config, build_engine(config, weights, DEVICE), eng)


def test_deltanet_mixer_timing(mixers):
    """One frame's 30 DeltaNet mixers (drama3-mid's DeltaNet layers, repeated, each with a state of its own), each
    path captured as a CUDA graph. Prints ms per frame and the ratios; asserts only that the outputs stay finite
    (every replay advances each path's own states, so the paths drift apart)."""
    steps, layers, cfg, state_type = mixers
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    chosen = [layers[i % len(layers)] for i in range(FULL_MODEL_DELTANET_LAYERS)]
    x0, moe_out = (torch.randn(1, cfg.hidden_size, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
    outs, times = {}, {}
    for name, step in steps.items():
        states = _states(state_type, cfg, torch.Generator(device=DEVICE).manual_seed(2), FULL_MODEL_DELTANET_LAYERS)

        def frame(mixer=step.deltanet_mixer, name=name, states=states) -> None:
            x = x0
            for lw, state in zip(chosen, states):
                x, h = mixer(x, moe_out, lw, cfg, state)
            outs[name] = h
        times[name] = graph_ms(frame)
    print(f"backbone DeltaNet mixers per frame ({FULL_MODEL_DELTANET_LAYERS} layers, ms): {times}; triton vs torch "
          f"{times['torch'] / times['triton']:.2f}x, triton_inductor vs inductor "
          f"{times['inductor'] / times['triton_inductor']:.2f}x")
    assert all(torch.isfinite(o).all() for o in outs.values())
