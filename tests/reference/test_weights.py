"""Seeded weight init: the docs/weights.md name/shape table, determinism, realistic scales, lm_head narrowing,
fingerprints, and (GPU) the full drama3 init's memory bound."""
from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from reference_runtime.config import get_config
from reference_runtime.fp8 import FP8_DTYPE, dequantize_blocks
from reference_runtime.weights import init_weights, narrow_lm_head, weight_shapes, weights_fingerprint

TINY = get_config("drama3-tiny")


@pytest.fixture(scope="module")
def tiny_weights():
    return init_weights(TINY, seed=0, device="cpu")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == FP8_DTYPE else t


def _docs_table_tiny() -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """docs/weights.md written out for drama3-tiny by hand: H=64, V=512+64, E=8, I=Is=32, B=16, hd=16, 4/2 heads,
    GDN nk=2 nv=4 dk=dv=16 kernel 4, tower It=128 head_size=64, 10 codebooks of 64, 13 tower layers."""
    f32, fp8 = torch.float32, FP8_DTYPE
    t = {"model.embed_tokens.weight": ((576, 64), f32)}

    def attention(p: str) -> None:
        t.update({f"{p}q_proj.weight": ((128, 64), f32), f"{p}k_proj.weight": ((32, 64), f32),
                  f"{p}v_proj.weight": ((32, 64), f32), f"{p}o_proj.weight": ((64, 64), f32),
                  f"{p}q_norm.weight": ((16,), f32), f"{p}k_norm.weight": ((16,), f32)})

    for i in range(4):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = t[p + "post_attention_layernorm.weight"] = ((64,), f32)
        if i == 3:
            attention(p + "self_attn.")
        else:
            g = p + "linear_attn."
            t.update({g + "in_proj_qkvz.weight": ((192, 64), f32), g + "in_proj_ba.weight": ((8, 64), f32),
                      g + "conv1d.weight": ((128, 1, 4), f32), g + "dt_bias": ((4,), f32), g + "A_log": ((4,), f32),
                      g + "norm.weight": ((16,), f32), g + "out_proj.weight": ((64, 64), f32)})
        m = p + "mlp."
        t.update({m + "gate.weight": ((8, 64), f32),
                  m + "experts.gate_up_proj": ((8, 64, 64), fp8),
                  m + "experts.gate_up_proj_scale_inv": ((8, 4, 4), f32),
                  m + "experts.down_proj": ((8, 64, 32), fp8),
                  m + "experts.down_proj_scale_inv": ((8, 4, 2), f32),
                  m + "shared_expert.gate_proj.weight": ((32, 64), f32),
                  m + "shared_expert.up_proj.weight": ((32, 64), f32),
                  m + "shared_expert.down_proj.weight": ((64, 32), f32),
                  m + "shared_expert_gate.weight": ((1, 64), f32)})
    t["model.norm.weight"] = ((64,), f32)
    t["lm_head.weight"] = ((576, 64), f32)
    t["audio_decoder.codebook_embeddings.weight"] = ((640, 64), f32)
    for j in range(13):
        p = f"audio_decoder.layers.{j}."
        for norm in ("enorm", "hnorm", "input_layernorm", "post_attention_layernorm", "final_norm"):
            t[f"{p}{norm}.weight"] = ((64,), f32)
        t.update({p + "code_embedding.weight": ((64, 64), f32), p + "eh_proj.weight": ((64, 128), f32),
                  p + "mlp.gate_proj.weight": ((128, 64), f32), p + "mlp.up_proj.weight": ((128, 64), f32),
                  p + "mlp.down_proj.weight": ((64, 128), f32)})
        attention(p + "self_attn.")
    t.update({f"audio_decoder.heads.{k}.weight": ((64, 64), f32) for k in range(9)})
    return t


def test_tiny_weights_match_the_docs_table(tiny_weights):
    expected = _docs_table_tiny()
    model = {n: (tuple(w.shape), w.dtype) for n, w in tiny_weights.items() if not n.startswith("codec.")}
    assert sorted(set(expected) - set(model)) == [] and sorted(set(model) - set(expected)) == []
    assert model == expected
    codec = [n for n in tiny_weights if n.startswith("codec.")]
    assert codec and all(tiny_weights[n].dtype == torch.float32 for n in codec)


def test_full_drama3_table_without_allocating():
    specs = weight_shapes(get_config("drama3"))
    shape = {name: spec.shape for name, spec in specs.items()}
    assert shape["model.embed_tokens.weight"] == shape["lm_head.weight"] == (248320 + 4096, 2048)
    assert shape["model.layers.3.self_attn.q_proj.weight"] == (16 * 256 * 2, 2048)
    assert shape["model.layers.39.self_attn.k_proj.weight"] == (2 * 256, 2048)
    assert shape["model.layers.0.linear_attn.in_proj_qkvz.weight"] == (2 * 2048 + 2 * 4096, 2048)
    assert shape["model.layers.0.linear_attn.conv1d.weight"] == (2 * 2048 + 4096, 1, 4)
    assert shape["model.layers.38.mlp.experts.gate_up_proj"] == (256, 1024, 2048)
    assert shape["model.layers.38.mlp.experts.gate_up_proj_scale_inv"] == (256, 8, 16)
    assert shape["model.layers.38.mlp.experts.down_proj_scale_inv"] == (256, 16, 4)
    assert shape["audio_decoder.layers.12.mlp.down_proj.weight"] == (2048, 6144)
    assert shape["audio_decoder.heads.8.weight"] == (4096, 2048)
    assert sum(".self_attn.q_proj" in n for n in shape if n.startswith("model.")) == 10
    assert sum(".linear_attn.A_log" in n for n in shape) == 30
    assert sum(n.startswith("audio_decoder.layers.") and n.endswith("eh_proj.weight") for n in shape) == 13
    fp8_params = sum(math.prod(s.shape) for s in specs.values() if s.kind == "fp8")
    assert fp8_params == 40 * 256 * 3 * 2048 * 512
    total = sum(math.prod(s.shape) for s in specs.values())
    assert 35.0e9 < total < 36.5e9, f"backbone + tower should be ~35.9B params, got {total / 1e9:.2f}B"


def test_same_seed_same_weights_and_other_seed_changes_every_tensor(tiny_weights):
    again = init_weights(TINY, seed=0, device="cpu")
    other = init_weights(TINY, seed=1, device="cpu")
    assert list(again) == list(tiny_weights)
    for name, w in tiny_weights.items():
        assert torch.equal(_bits(w), _bits(again[name])), name
        assert not torch.equal(_bits(w), _bits(other[name])), f"{name} ignores the seed"


def test_values_depend_on_name_not_init_order(tiny_weights):
    # Twice the layers: the shared names with the same spec (residual-branch stds shrink with depth) match.
    deeper = replace(TINY, backbone=replace(TINY.backbone, num_layers=8))
    deeper_specs, tiny_specs = weight_shapes(deeper), weight_shapes(TINY)
    same = [n for n, spec in tiny_specs.items() if deeper_specs.get(n) == spec and spec.kind != "scale"]
    assert "model.layers.3.self_attn.q_proj.weight" in same and "model.layers.0.mlp.experts.gate_up_proj" in same
    deeper_weights = init_weights(deeper, seed=0, device="cpu")
    for name in same:
        assert torch.equal(_bits(deeper_weights[name]), _bits(tiny_weights[name])), name


def test_dtype_override_and_tiny_init_is_fast():
    start = time.perf_counter()
    weights = init_weights(TINY, seed=3, device="cpu", dtype=torch.bfloat16)
    assert time.perf_counter() - start < 1.0
    assert weights["lm_head.weight"].dtype == torch.bfloat16
    assert weights["model.layers.0.mlp.experts.down_proj"].dtype == FP8_DTYPE
    assert weights["model.layers.0.mlp.experts.down_proj_scale_inv"].dtype == torch.float32


def test_gated_deltanet_decay_parameters_in_range(tiny_weights):
    for i in range(3):
        a = tiny_weights[f"model.layers.{i}.linear_attn.A_log"].exp()
        dt = F.softplus(tiny_weights[f"model.layers.{i}.linear_attn.dt_bias"])
        assert ((a >= 1) & (a <= 16)).all()
        assert ((dt >= 1e-3 * 0.999) & (dt <= 0.1 * 1.001)).all()


def test_scales_keep_unit_rms_and_route_tokens_across_experts(tiny_weights):
    x = tiny_weights["model.embed_tokens.weight"]
    assert 0.8 < x.pow(2).mean().sqrt() < 1.2
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
    experts = "model.layers.0.mlp.experts.gate_up_proj"
    gate_up = dequantize_blocks(tiny_weights[experts], tiny_weights[experts + "_scale_inv"], TINY.backbone.fp8_block)
    assert 0.7 < (normed @ gate_up[0].T).std() < 1.3  # routed expert pre-activations ~ unit scale
    logits = normed @ tiny_weights["model.layers.0.mlp.gate.weight"].T
    top = logits.topk(TINY.backbone.num_experts_per_tok, dim=-1).indices.flatten()
    share = torch.bincount(top, minlength=TINY.backbone.num_experts) / top.numel()
    assert share.min() > 0.02 and share.max() < 0.4, f"router load per expert {share.tolist()}"


def test_narrow_lm_head_keeps_eos_then_semantic_band(tiny_weights):
    lm_head = tiny_weights["lm_head.weight"]
    narrow = narrow_lm_head(TINY, lm_head)
    assert narrow.shape == (1 + TINY.codebook_size, TINY.hidden_size)
    assert torch.equal(narrow[0], lm_head[TINY.eos_token_id])
    assert torch.equal(narrow[1:], lm_head[TINY.semantic_begin:])
    with pytest.raises(ValueError, match=r"lm_head.weight must be \(576, 64\)"):
        narrow_lm_head(TINY, lm_head[:-1])


def test_fingerprint_tracks_names_dtypes_and_values(tiny_weights):
    base = weights_fingerprint(tiny_weights)
    copy = {n: w.clone() for n, w in tiny_weights.items()}
    assert weights_fingerprint(copy) == base
    copy["lm_head.weight"][0, 0] += 1.0
    assert weights_fingerprint(copy) != base
    renamed = dict(tiny_weights)
    renamed["lm_head.weights"] = renamed.pop("lm_head.weight")
    assert weights_fingerprint(renamed) != base
    assert weights_fingerprint(tiny_weights | {"model.norm.weight": tiny_weights["model.norm.weight"].double()}) != base


@pytest.mark.gpu
def test_cuda_init_is_deterministic_and_full_init_fits_one_layer_of_headroom():
    assert weights_fingerprint(init_weights(TINY, 0, "cuda")) == weights_fingerprint(init_weights(TINY, 0, "cuda"))
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    weights = init_weights(get_config("drama3"), seed=0, device="cuda")
    kept = (torch.cuda.memory_allocated() - before) / 2**30
    extra = (torch.cuda.max_memory_allocated() - before) / 2**30 - kept
    assert 36 < kept < 38.5, f"drama3 weights should take ~37.2 GiB with FP8 experts, got {kept:.1f} GiB"
    assert extra < 3, f"init peaked {extra:.1f} GiB above the final weights; expected ~one layer's experts"
    assert all(torch.isfinite(w.float()).all() for n, w in weights.items() if not n.endswith("_proj"))
