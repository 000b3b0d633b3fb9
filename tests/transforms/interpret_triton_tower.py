"""triton_tower on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1: it applies
only on top of cuda_graph_frame (once) and commutes with the other CUDA transforms of the recipes; each kernel
equals the graphed torch tower step's math (decode_ops.norm, the Projection GEMVs, attention_decode, SwiGLU,
the residuals) at drama3-tiny's tower dims in float32 and at a wider bf16 geometry, with the default tiles and
with tiles small enough for several chunks, splits and KV tiles; and the transformed engine's teacher-forced
logits match the reference on drama3-tiny. Full-size dims, compiled kernels and timing run in tests/gpu/."""
from __future__ import annotations

import importlib
import os
import random
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from interpret_triton_moe_fused import _proposer_order
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

triton = pytest.importorskip("triton")
tl = triton.language
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
SMALL = {"block_n": 16, "block_k": 32, "residual_block_n": 16, "residual_block_k": 32, "residual_warps": 2,
         "attn_rows": 16, "split_rows": 16, "gemv_warps": 1, "num_warps": 2}


@dataclass(frozen=True, slots=True)
class Dims:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    inter: int
    dtype: torch.dtype


T = CFG.tower
# drama3-tiny's tower (float32, as its weights) and a wider bf16 one (4 query heads per kv head); heads x head_dim
# = hidden in both, so an identity o_proj shows attention_decode's output before it
DIMS = {"tiny": Dims(CFG.hidden_size, T.num_attention_heads, T.num_key_value_heads, T.head_dim, T.rotary_dim,
                     T.intermediate_size, torch.float32),
        "bf16": Dims(256, 8, 2, 32, 16, 512, torch.bfloat16)}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}  # bf16: a rounding step apart (fp32 sums in another order)


@pytest.fixture(scope="module", autouse=True)
def cuda_like_bf16():
    """The interpreter is off for bf16 in two ways CUDA is not: it casts float32 to bf16 by truncating (CUDA and
    torch round to the nearest even) and its tl.dot multiplies bf16 bit patterns as integers. Both take torch's
    bf16 here, so the bf16 cases check the kernels' rounding points rather than the interpreter."""
    interpreter = importlib.import_module("triton.runtime.interpreter")
    original, builder = interpreter._convert_float, interpreter.InterpreterBuilder
    integer_dot = builder.create_dot

    def convert(data: np.ndarray, src, dst, rounding) -> np.ndarray:
        if (src, dst) != (tl.float32, tl.bfloat16):
            return original(data, src, dst, rounding)
        return torch.from_numpy(np.ascontiguousarray(data)).bfloat16().view(torch.int16).numpy().view(np.uint16)

    def float_dot(self, a, b, d, *args):
        a, b = (interpreter.TensorHandle(original(t.data, tl.bfloat16, tl.float32, None).view(np.float32),
                                         tl.float32) if t.dtype == tl.bfloat16 else t for t in (a, b))
        return integer_dot(self, a, b, d, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interpreter, "_convert_float", convert)
        patch.setattr(builder, "create_dot", float_dot)
        yield


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(cuda_graph_frame alone: the torch tower step, its triton_tower module, that module with SMALL tiles)."""
    root, graph = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), [cuda_graph_frame])
    fast = load(transformed(graph, [triton_tower]), root)
    small = apply_edits(graph, patch_edits(triton_tower.apply(graph, next(triton_tower.variants()) | SMALL)))
    kernels = [importlib.import_module(f"{p.__name__}.triton_tower") for p in (fast, load(small, root))]
    return load(graph, root), fast, kernels


def test_applies_only_on_top_of_cuda_graph_frame_and_once():
    assert triton_tower.requires == ("cuda_graph_frame",) and triton_tower.devices == frozenset({"cuda"})
    assert triton_tower.feature == "codebook_mtp" and triton_tower.lesson
    graph = assert_applies_once_on_top_of(triton_tower, [cuda_graph_frame])
    for bad in ({"block_k": 384}, {"attn_rows": 8}):
        with pytest.raises(ValueError, match="power of two"):
            triton_tower.apply(graph, next(triton_tower.variants()) | bad)


def test_stacks_with_the_other_cuda_transforms_in_any_order():
    """In any order the proposer could use with the recipes' CUDA transforms it leaves the same tower step;
    placed anywhere after cuda_graph_frame in the recipes' order, the very same package."""
    names = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
             "cuda_graph_prefill", "graph_topk_sampling", "inductor_decode_steps", "triton_moe_fused",
             "triton_sampling", "triton_tower"]
    rng = random.Random(0)
    steps = {tuple(transformed(engine_files(REFERENCE), [TRANSFORMS[n] for n in _proposer_order(names, rng)])[f]
                   for f in ("decode_tower.py", "decode_step.py")) for _ in range(12)}
    assert len(steps) == 1
    tower, step = steps.pop()
    assert "return triton_tower_layer(" in tower and "tower_layer = tower_layer_decode  #" in step
    stack = [TRANSFORMS[n] for n in names[:-1]]
    packages = [transformed(engine_files(REFERENCE), stack[:i] + [triton_tower] + stack[i:])
                for i in range(1, len(stack) + 1)]
    assert all(p == packages[0] for p in packages[1:])


def _layer(pkg, dims: Dims, gen: torch.Generator, fuse: bool):
    """Random tower layer weights of `dims` (identity o_proj), as decode_weights builds them."""
    dw = pkg.decode_weights

    def mat(rows: int, cols: int) -> torch.Tensor:
        return (torch.randn(rows, cols, generator=gen) / cols ** 0.5).to(dims.dtype)

    def gain(n: int) -> torch.Tensor:
        return 1.0 + 0.2 * torch.randn(n, generator=gen)

    h, nh, nkv, hd = dims.hidden, dims.heads, dims.kv_heads, dims.head_dim
    attn = dw.AttnWeights(dw.Projection([mat(2 * nh * hd, h), mat(nkv * hd, h), mat(nkv * hd, h)], fuse),
                          torch.eye(h, dtype=dims.dtype), gain(hd), gain(hd))
    return dw.TowerLayerWeights(mat(4, h), gain(h), gain(h), mat(h, 2 * h), gain(h), attn, gain(h),
                                dw.Projection([mat(dims.inter, h), mat(dims.inter, h)], fuse), mat(h, dims.inter),
                                gain(h))


def _geometry(pkg, dims: Dims, interleaved: bool = True):
    """The tower's geometry (interleaved RoPE) or, with interleaved=False, the backbone's (rotate-half)."""
    return pkg.attention.AttentionGeometry(dims.heads, dims.kv_heads, dims.head_dim, dims.rotary_dim, 1e7,
                                           interleaved, 1e-6)


def _caches(pkg, dims: Dims, gen: torch.Generator) -> list:
    """Two 64-row static KV caches with the same random rows: one for the torch step, one for the kernels."""
    caches = [pkg.static_state.StaticKVCache(64, dims.kv_heads, dims.head_dim, dims.dtype, torch.device("cpu"))
              for _ in range(2)]
    keys, values = (torch.randn(caches[0].keys.shape, generator=gen) for _ in range(2))
    for cache in caches:
        cache.keys.copy_(keys)
        cache.values.copy_(values)
    return caches


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and want.abs().max() > 0.1
    tol = TOL[want.dtype]
    torch.testing.assert_close(got, want.reshape(got.shape), atol=tol, rtol=tol)


@pytest.mark.parametrize("size, fuse, tiles", [("tiny", True, 0), ("tiny", False, 1), ("bf16", True, 1),
                                               ("bf16", False, 0)],
                         ids=["tiny-fused-default", "tiny-unfused-small", "bf16-fused-small", "bf16-unfused-default"])
def test_gemv_kernels_match_the_torch_step(packages, size, fuse, tiles):
    graph, _, kernels = packages
    dims, kern, norm = DIMS[size], kernels[tiles], graph.decode_ops.norm
    gen = torch.Generator().manual_seed(sorted(DIMS).index(size) * 4 + fuse * 2 + tiles)
    w, eps = _layer(graph, dims, gen, fuse), 1e-6
    h, e, a = (torch.randn(1, n, generator=gen).to(dims.dtype) for n in (dims.hidden, dims.hidden, dims.inter))
    _close(kern.enter(h, e, w, eps), F.linear(torch.cat((norm(e, w.enorm, eps), norm(h, w.hnorm, eps)), -1),
                                               w.eh_proj))
    _close(kern.norm_gemv(h, w.input_gain, w.attn.qkv, eps, swiglu=False),
           torch.cat(w.attn.qkv(norm(h, w.input_gain, eps)), -1))
    gate, up = w.gate_up(norm(h, w.post_gain, eps))
    _close(kern.norm_gemv(h, w.post_gain, w.gate_up, eps, swiglu=True), F.silu(gate) * up)
    ticket = torch.zeros(1, dtype=torch.int32)
    _close(kern.residual_gemv(a, w.down, h, None, ticket), h + F.linear(a, w.down))
    _close(kern.residual_gemv(a, w.down, h, (w.final_gain, eps), ticket), norm(h + F.linear(a, w.down),
                                                                               w.final_gain, eps))
    assert ticket.item() == 0


# (span bucket, positions): row 0, a row inside the first split, the split boundaries, the bucket's last row
SPANS = [(16, (0, 7)), (64, (15, 16, 40, 63))]


@pytest.mark.parametrize("interleaved", [True, False], ids=["tower_rope", "backbone_rope"])
@pytest.mark.parametrize("tiles", [0, 1], ids=["default", "small"])
@pytest.mark.parametrize("size", sorted(DIMS))
def test_attention_kernel_matches_attention_decode(packages, size, tiles, interleaved):
    """q/k norm, RoPE (either pairing), the cache write at pos, rows after pos ignored, the splits merged, the
    sigmoid gate."""
    graph, fast, kernels = packages
    dims, kern = DIMS[size], kernels[tiles]
    gen = torch.Generator().manual_seed(7 + tiles)
    w, geo = _layer(graph, dims, gen, fuse=True).attn, _geometry(graph, dims, interleaved)
    rope = graph.decode_ops.RopeTable(64, dims.rotary_dim, 1e7, torch.device("cpu"))
    for span, positions in SPANS:
        for p in positions:
            want_cache, got_cache = _caches(fast, dims, gen)
            x = torch.randn(1, dims.hidden, generator=gen).to(dims.dtype)
            pos = torch.tensor([p])
            want = graph.decode_attention.attention_decode(x, w, geo, want_cache, pos, torch.arange(span) > p, rope)
            got = kern.attention(torch.cat(w.qkv(x), -1), w, geo, got_cache, pos, span, rope)
            _close(got, want)
            _close(got_cache.keys, want_cache.keys)
            _close(got_cache.values, want_cache.values)
            assert not got_cache.tickets.any()


@pytest.mark.parametrize("tiles", [0, 1], ids=["default", "small"])
@pytest.mark.parametrize("size", sorted(DIMS))
def test_layer_matches_tower_layer_decode(packages, size, tiles):
    graph, fast, kernels = packages
    dims, kern = DIMS[size], kernels[tiles]
    gen = torch.Generator().manual_seed(11 + tiles)
    w, geo = _layer(graph, dims, gen, fuse=tiles == 0), _geometry(graph, dims)
    w.attn.o_proj = (torch.randn(dims.hidden, dims.hidden, generator=gen) / dims.hidden ** 0.5).to(dims.dtype)
    rope = graph.decode_ops.RopeTable(64, dims.rotary_dim, 1e7, torch.device("cpu"))
    want_cache, got_cache = _caches(fast, dims, gen)
    h, e = (torch.randn(1, dims.hidden, generator=gen).to(dims.dtype) for _ in range(2))
    for p in (3, 30):
        pos, future = torch.tensor([p]), torch.arange(64) > p
        want = graph.decode_tower.tower_layer_decode(h, e, w, geo, want_cache, pos, future, rope)
        _close(kern.triton_tower_layer(h, e, w, geo, got_cache, pos, future, rope), want)
        assert not got_cache.tickets.any()


def test_params_module_holds_the_first_variant(packages):
    _, fast, _ = packages
    params = importlib.import_module(f"{fast.__name__}.triton_tower_params")
    assert {"block_n": params.BLOCK_N, "block_k": params.BLOCK_K, "residual_block_n": params.RESIDUAL_BLOCK_N,
            "residual_block_k": params.RESIDUAL_BLOCK_K, "residual_warps": params.RESIDUAL_WARPS,
            "attn_rows": params.ATTN_ROWS, "split_rows": params.SPLIT_ROWS, "gemv_warps": params.GEMV_WARPS,
            "num_warps": params.NUM_WARPS} == next(triton_tower.variants())


def test_engine_teacher_forced_logits_match_reference(packages, monkeypatch):
    _, fast, kernels = packages
    original, calls = kernels[0].triton_tower_layer, []
    monkeypatch.setattr(kernels[0], "triton_tower_layer", lambda *args: calls.append(1) or original(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    # two frames: the prefill's predict step and a decode frame's, the two callers of the tower (each frame is
    # 78 interpreted launches)
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=2, ignore_eos=True, seed=1))
    assert len(calls) == CFG.num_tower_layers * len(frames)  # every predict step's tower, through the kernels
