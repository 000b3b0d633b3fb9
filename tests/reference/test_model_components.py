"""Each engine component on drama3-tiny: shapes and dtypes, incremental state == one whole-sequence call, and
the DeltaNet / MoE math against independent formulations."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reference_runtime.config import get_config
from reference_runtime.fp8 import dequantize_blocks
from reference_runtime.model.attention import AttentionGeometry, GatedAttention
from reference_runtime.model.backbone import Backbone
from reference_runtime.model.deltanet import GatedDeltaNet, delta_rule
from reference_runtime.model.kv_cache import KVCache
from reference_runtime.model.moe import SparseMoE
from reference_runtime.model.tower import Tower
from reference_runtime.weights import init_weights

CPU = torch.device("cpu")
CFG = get_config("drama3-tiny")


@pytest.fixture(scope="module")
def weights():
    return init_weights(CFG, seed=0, device=CPU)


def _chunks(x: torch.Tensor) -> list[tuple[int, int]]:
    return [(0, 5), (5, 6), (6, 7), (7, x.shape[0])]  # a prefill, then single rows, then the rest


def test_kv_cache_grows_and_keeps_rows():
    cache = KVCache()
    rows = torch.randn(100, 2, 4)
    for start, end in [(0, 3), (3, 70), (70, 71), (71, 100)]:
        keys, values = cache.append(rows[start:end], -rows[start:end])
    assert cache.length == 100
    torch.testing.assert_close(keys, rows, rtol=0, atol=0)
    torch.testing.assert_close(values, -rows, rtol=0, atol=0)


def test_attention_with_cache_matches_whole_sequence(weights):
    b = CFG.backbone
    geo = AttentionGeometry(b.num_attention_heads, b.num_key_value_heads, b.head_dim, b.rotary_dim, b.rope_theta,
                            False, b.rms_norm_eps)
    attn = GatedAttention(weights, "model.layers.3.self_attn.", b.hidden_size, geo, CPU)
    x = torch.randn(12, b.hidden_size)
    positions = torch.arange(12)
    full = attn(x, positions, None)
    assert full.shape == x.shape and full.dtype == x.dtype
    cache = KVCache()
    pieces = [attn(x[s:e], positions[s:e], cache) for s, e in _chunks(x)]
    torch.testing.assert_close(torch.cat(pieces), full, atol=1e-5, rtol=1e-5)


def test_delta_rule_matches_the_matrix_form():
    """S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t."""
    T, h, dk, dv = 6, 3, 4, 5
    q, k = torch.randn(T, h, dk), F.normalize(torch.randn(T, h, dk), dim=-1)
    v, beta, g = torch.randn(T, h, dv), torch.rand(T, h), -torch.rand(T, h)
    state = torch.randn(h, dk, dv)
    expected_state = state.clone()
    out = delta_rule(q, k, v, beta, g, state)
    eye = torch.eye(dk)
    for t in range(T):
        for i in range(h):
            kk = k[t, i][:, None]
            decay = torch.exp(g[t, i]) * (eye - beta[t, i] * kk @ kk.T)
            expected_state[i] = decay @ expected_state[i] + beta[t, i] * kk @ v[t, i][None]
            torch.testing.assert_close(out[t, i], expected_state[i].T @ q[t, i], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, expected_state, atol=1e-5, rtol=1e-5)


def test_deltanet_state_carries_across_calls(weights):
    gdn = GatedDeltaNet(weights, "model.layers.0.linear_attn.", CFG.backbone, CPU)
    x = torch.randn(11, CFG.hidden_size)
    full = gdn(x, torch.arange(11), None)
    assert full.shape == x.shape and full.dtype == x.dtype
    state = gdn.new_state(x.dtype, CPU)
    pieces = [gdn(x[s:e], torch.arange(s, e), state) for s, e in _chunks(x)]
    torch.testing.assert_close(torch.cat(pieces), full, atol=1e-5, rtol=1e-5)
    assert state.conv.shape == (CFG.backbone.linear_conv_kernel - 1, gdn.conv_channels)
    assert state.recurrent.dtype == torch.float32 and state.recurrent.abs().sum() > 0


def test_moe_matches_dense_mixture_of_all_experts(weights):
    b, p = CFG.backbone, "model.layers.1.mlp."
    moe = SparseMoE(weights, p, b, CPU)
    x = torch.randn(9, b.hidden_size)
    out = moe(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    probs = torch.softmax(x @ weights[p + "gate.weight"].T, dim=-1)
    kept = probs * (probs >= probs.topk(b.num_experts_per_tok, dim=-1).values[:, -1:])
    mix = kept / kept.sum(-1, keepdim=True)  # (T, E), zero outside each token's top-k
    gate_up = dequantize_blocks(weights[p + "experts.gate_up_proj"], weights[p + "experts.gate_up_proj_scale_inv"],
                                b.fp8_block)
    down = dequantize_blocks(weights[p + "experts.down_proj"], weights[p + "experts.down_proj_scale_inv"], b.fp8_block)
    gate, up = torch.einsum("eoh,th->teo", gate_up, x).chunk(2, dim=-1)
    routed = torch.einsum("te,teh->th", mix, torch.einsum("eho,teo->teh", down, F.silu(gate) * up))
    w = {n: weights[f"{p}shared_expert.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj")}
    shared = (F.silu(x @ w["gate_proj"].T) * (x @ w["up_proj"].T)) @ w["down_proj"].T
    shared = shared * torch.sigmoid(x @ weights[p + "shared_expert_gate.weight"].T)
    torch.testing.assert_close(out, routed + shared, atol=1e-5, rtol=1e-5)
    assert moe.expert_counts.sum() == 9 * b.num_experts_per_tok


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backbone_and_tower_shapes_and_dtypes(dtype):
    weights = init_weights(CFG, seed=1, device=CPU, dtype=dtype)
    backbone, tower = Backbone(weights, CFG, CPU), Tower(weights, CFG, CPU)
    T = 7
    rows = torch.zeros(T, 11, dtype=torch.long)
    rows[:, 0] = CFG.semantic_begin + torch.arange(T)
    rows[:, 1] = torch.arange(T)
    rows[:, 2:] = 3
    hidden = backbone(rows[:, 0], torch.arange(T), backbone.new_caches())
    assert hidden.shape == (T, CFG.hidden_size) and hidden.dtype == dtype
    main = backbone.main_logits(hidden)
    assert main.shape == (T, 1 + CFG.codebook_size) and main.dtype == torch.float32
    order = []

    def choose(k: int, logits: torch.Tensor) -> torch.Tensor:
        order.append(k)
        assert logits.shape == (T, CFG.tower.head_size) and logits.dtype == torch.float32
        return torch.full((T,), k, dtype=torch.long)

    codes = tower(hidden, rows, rows[:, 1], torch.ones(T, dtype=torch.bool), torch.arange(T), tower.new_caches(),
                  choose)
    assert codes.shape == (T, CFG.num_codebooks - 1, CFG.tower.head_size) and codes.dtype == torch.float32
    assert order == list(range(1, CFG.num_codebooks))
    assert torch.isfinite(main).all() and torch.isfinite(codes).all()


def test_tower_ignores_label_codes_of_non_semantic_frames(weights):
    tower = Tower(weights, CFG, CPU)
    hidden, rows = torch.randn(2, CFG.hidden_size), torch.zeros(2, 11, dtype=torch.long)
    not_semantic = torch.zeros(2, dtype=torch.bool)
    zeros, ones = torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long)
    a = tower(hidden, rows, zeros, not_semantic, torch.arange(2), None, lambda k, _: zeros)
    b = tower(hidden, rows, torch.tensor([5, 9]), not_semantic, torch.arange(2), None, lambda k, _: ones)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_input_frame_embedding_sums_codebooks_of_audio_rows_only(weights):
    tower = Tower(weights, CFG, CPU)
    rows = torch.zeros(2, 11, dtype=torch.long)
    rows[0, 0] = 7  # a text row: its (zero) codes must not leak in
    rows[1, 0], rows[1, 1:] = CFG.semantic_begin + 4, torch.arange(4, 14)
    extra = tower.input_frame_embedding(rows)
    assert extra[0].abs().max() == 0
    table = weights["audio_decoder.codebook_embeddings.weight"]
    expected = sum(table[c * CFG.codebook_size + 4 + c] for c in range(CFG.num_codebooks))
    torch.testing.assert_close(extra[1], expected)
