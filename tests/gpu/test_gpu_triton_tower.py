"""triton_tower on CUDA (compiled kernels, bf16): at the full model's tower dims (drama3-mid's tower is drama3's)
each kernel and the whole layer match the graphed torch tower step and are deterministic, also replayed from a
CUDA graph at growing positions (pos read on the device, the tickets back at 0 after every launch); engines with
the kernels pass the teacher-forced gate at drama3-tiny and drama3-mid; and the 13-layer tower step's time and
kernels per layer are printed against the torch step's, plain and inductor-compiled."""
from __future__ import annotations

import importlib
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from gpu_engines import (SAMPLING_STACK, assert_bf16_close, assert_passes_gate, config_named, kv_caches,
                         mid_config)

from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_steps import inductor_decode_steps
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.bench import graph_ms
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

pytestmark = pytest.mark.gpu
pytest.importorskip("triton")
DEVICE = torch.device("cuda")
FAST = SAMPLING_STACK + ["triton_tower"]
OTHER_TILES = {"block_n": 32, "block_k": 256, "attn_rows": 64, "split_rows": 128, "num_warps": 8}
# (span bucket, position): the first row, a bucket's last row, mid-bucket, the longest context
CASES = [(256, 0), (256, 255), (1024, 700), (4096, 4095)]


@pytest.fixture(scope="module")
def tower(load_package):
    """(torch step package, {params: kernels module}, drama3-mid's decode tower layers, geometry, rope table)."""
    config = mid_config()
    weights = init_weights(config, seed=0, device=DEVICE)
    graph = load_package([(cuda_graph_frame, {})])
    kernels = {name: importlib.import_module(f"{load_package([(cuda_graph_frame, {}), (triton_tower, p)]).__name__}"
                                             ".triton_tower") for name, p in (("default", {}), ("other", OTHER_TILES))}
    layers = graph.decode_weights.decode_weights(weights, config, DEVICE, fuse=True).tower
    t = config.tower
    geo = graph.attention.AttentionGeometry(t.num_attention_heads, t.num_key_value_heads, t.head_dim, t.rotary_dim,
                                            t.rope_theta, interleaved_rope=True, eps=t.rms_norm_eps)
    rope = graph.decode_ops.RopeTable(config.max_context_rows, t.rotary_dim, t.rope_theta, DEVICE)
    return graph, kernels, layers, geo, rope


def _caches(kernels, geo, gen: torch.Generator, count: int = 2) -> list:
    """KV caches of the kernels' package (with the tickets they need)."""
    pkg = importlib.import_module(kernels.__name__.rsplit(".", 1)[0])
    return kv_caches(pkg.static_state.StaticKVCache, geo, gen, count)


@pytest.mark.parametrize("tiles", ["default", "other"])
def test_gemv_kernels_match_the_torch_step(tower, tiles):
    graph, kernels, layers, geo, _ = tower
    kern, w, eps, norm = kernels[tiles], layers[5], geo.eps, graph.decode_ops.norm
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    h, e, a = (torch.randn(1, n, generator=gen, device=DEVICE).bfloat16() for n in (2048, 2048, w.down.shape[1]))
    assert_bf16_close(kern.enter(h, e, w, eps), F.linear(torch.cat((norm(e, w.enorm, eps), norm(h, w.hnorm, eps)), -1),
                                               w.eh_proj))
    qkv = kern.norm_gemv(h, w.input_gain, w.attn.qkv, eps, swiglu=False)
    assert_bf16_close(qkv, torch.cat(w.attn.qkv(norm(h, w.input_gain, eps)), -1))
    gate, up = w.gate_up(norm(h, w.post_gain, eps))
    assert_bf16_close(kern.norm_gemv(h, w.post_gain, w.gate_up, eps, swiglu=True), F.silu(gate) * up)
    ticket = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    assert_bf16_close(kern.residual_gemv(a, w.down, h, None, ticket), h + F.linear(a, w.down))
    final = kern.residual_gemv(a, w.down, h, (w.final_gain, eps), ticket)
    assert_bf16_close(final, norm(h + F.linear(a, w.down), w.final_gain, eps))
    assert ticket.item() == 0
    assert torch.equal(kern.residual_gemv(a, w.down, h, (w.final_gain, eps), ticket), final)


@pytest.mark.parametrize("tiles", ["default", "other"])
def test_attention_and_layer_match_the_torch_step(tower, tiles):
    """Attention (through o_proj, which both sides apply to their bf16 output) and the whole layer at short and
    long spans, with the cache row written at pos; the split merge is deterministic."""
    graph, kernels, layers, geo, rope = tower
    kern, w = kernels[tiles], layers[0]
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    for span, p in CASES:
        want_cache, got_cache = _caches(kern, geo, gen)
        x, e = (torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
        pos, future = torch.tensor([p], device=DEVICE), torch.arange(span, device=DEVICE) > p
        want = graph.decode_attention.attention_decode(x, w.attn, geo, want_cache, pos, future, rope)
        attn = kern.attention(torch.cat(w.attn.qkv(x), -1), w.attn, geo, got_cache, pos, span, rope)
        assert_bf16_close(F.linear(attn[None], w.attn.o_proj), want)
        assert_bf16_close(got_cache.keys[p], want_cache.keys[p])
        assert_bf16_close(got_cache.values[p], want_cache.values[p])
        assert not got_cache.tickets.any()
        assert torch.equal(kern.attention(torch.cat(w.attn.qkv(x), -1), w.attn, geo, got_cache, pos, span, rope), attn)
        want = graph.decode_tower.tower_layer_decode(x, e, w, geo, want_cache, pos, future, rope)
        assert_bf16_close(kern.triton_tower_layer(x, e, w, geo, got_cache, pos, future, rope), want)


def test_graph_replays_at_growing_positions(tower):
    """One capture at span 1024 replayed for 40 rows: each replay reads pos on the device and leaves the tickets
    at 0 for the next."""
    graph, kernels, layers, geo, rope = tower
    kern, w, span = kernels["default"], layers[7], 1024
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    want_cache, got_cache = _caches(kern, geo, gen)
    h, e = (torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16() for _ in range(2))
    pos, span_rows = torch.tensor([600], device=DEVICE), torch.zeros(span, dtype=torch.bool, device=DEVICE)
    out = torch.empty_like(h)

    def step() -> None:
        out.copy_(kern.triton_tower_layer(h, e, w, geo, got_cache, pos, span_rows, rope))
    step()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for p in range(600, 640):
        pos.fill_(p)
        g.replay()
        future = torch.arange(span, device=DEVICE) > p
        want = graph.decode_tower.tower_layer_decode(h, e, w, geo, want_cache, pos, future, rope)
        assert_bf16_close(out, want)
    assert not got_cache.tickets.any()
    assert_bf16_close(got_cache.keys[600:640], want_cache.keys[600:640])


@pytest.mark.parametrize("config_name", ["drama3-tiny", "drama3-mid"])
@pytest.mark.parametrize("names", [["cuda_graph_frame", "triton_tower"], FAST], ids=["minimal", "fast"])
def test_engine_passes_the_teacher_forced_gate(load_package, config_name, names):
    config = config_named(config_name)
    weights = init_weights(config, seed=0, device=DEVICE)
    eng = load_package([(TRANSFORMS[name], {}) for name in names]).build_engine(config, weights, DEVICE)
    assert_passes_gate(config, build_engine(config, weights, DEVICE), eng)


def _kernel_count(step: Callable[[], object]) -> int:
    """CUDA kernels (and copies) one eager call of `step` launches."""
    step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA)


def test_tower_stage_timing(tower, load_package):
    """The 13 tower layers of one frame at row 700 of a 1024-row bucket, each path captured as a CUDA graph:
    the torch step (as cuda_graph_frame runs it), the same compiled by inductor (inductor_decode_steps), the
    kernels. Prints ms per frame, the ratios and kernels per layer; asserts only that the outputs agree."""
    graph, kernels, layers, geo, rope = tower
    compiled = load_package([(cuda_graph_frame, {}), (inductor_decode_steps, {})])
    steps = {"torch": graph.decode_step.tower_layer, "inductor": compiled.decode_step.tower_layer,
             "triton": importlib.import_module(kernels["default"].__name__.rsplit(".", 1)[0]).decode_step.tower_layer}
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    caches = _caches(kernels["default"], geo, gen, count=len(layers))
    h = torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16()
    es = [torch.randn(1, 2048, generator=gen, device=DEVICE).bfloat16() for _ in layers]
    pos, future = torch.tensor([700], device=DEVICE), torch.arange(1024, device=DEVICE) > 700
    outs, times, counts = {}, {}, {}
    for name, layer in steps.items():
        def frame(layer=layer, name=name) -> None:
            x = h
            for w, e, cache in zip(layers, es, caches):
                x = layer(x, e, w, geo, cache, pos, future, rope)
            outs[name] = x
        times[name] = graph_ms(frame)
        counts[name] = _kernel_count(lambda layer=layer: layer(h, es[0], layers[0], geo, caches[0], pos, future, rope))
    print(f"tower step per frame (13 layers, ms): {times}; triton vs torch {times['torch'] / times['triton']:.2f}x, "
          f"vs inductor {times['inductor'] / times['triton']:.2f}x; CUDA kernels per layer: {counts}")
    assert_bf16_close(outs["triton"], outs["torch"], tol=5e-2)
