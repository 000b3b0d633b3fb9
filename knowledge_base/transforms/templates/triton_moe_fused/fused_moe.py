"""The decode MoE after the router + shared-expert GEMV in two Triton kernels, because the graphed frame is bound
by its kernel count (softmax, top-k, sums, two expert kernels and the shared expert's ops were ~12 per layer):
(A) every program routes the token itself (top-k of the router logits, renormalised softmax weights), then
computes silu(gate) * up for one tile of intermediate rows of one selected expert from the block-FP8 gate|up
stack, times that expert's routing weight; program (0, 0) also writes the selected ids for (B);
(B) per tile of output rows, the k routed down projections (FP8) plus the shared expert's down projection (bf16,
on silu(gate) * up of the GEMV's shared outputs, times sigmoid of its gate), all summed in one program: every
output row has one writer, so no atomics and the result is deterministic; given the residual stream, it also adds
the output to it (rounded as torch's `x + moe_out`). fp32 throughout; the output is in x's dtype. Loops over the
reduction dimension are unrolled; (B) loads every chunk before its first reduction, whose barrier would otherwise
hold the next chunk's loads back (a DRAM round trip per chunk).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.config import BackboneConfig

from .decode_weights import MoEWeights
from .fp8_bits import fp8_e4m3
from .fused_moe_params import BLOCK_K, BLOCK_N, DOWN_BLOCK_K, DOWN_BLOCK_N, DOWN_WARPS, NUM_WARPS


@triton.jit
def _route(logits_ptr, E: tl.constexpr, EP: tl.constexpr, K: tl.constexpr, KP: tl.constexpr):
    """(expert ids, renormalised softmax weights), KP long, of the K largest router logits: softmax is monotonic
    and its denominator cancels in the renormalisation. Ties go to the lowest id (torch.topk's choice); slots
    past K get id 0 and weight 0. One max-reduction per pick: logit and id packed in one int64 key."""
    experts = tl.arange(0, EP)
    logits = tl.load(logits_ptr + experts, mask=experts < E, other=float("-inf")).to(tl.float32)
    bits = logits.to(tl.int32, bitcast=True)
    order = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # signed-int order = float order
    keys = (order.to(tl.int64) << 32) | (EP - 1 - experts).to(tl.int64)
    slots = tl.arange(0, KP)
    ids = tl.zeros((KP,), tl.int32)
    top = tl.full((KP,), float("-inf"), tl.float32)
    for i in tl.static_range(K):
        best = tl.max(keys, axis=0)
        expert = EP - 1 - best.to(tl.int32)  # the low 32 bits
        high = (best >> 32).to(tl.int32)
        ids = tl.where(slots == i, expert, ids)
        top = tl.where(slots == i, (high ^ ((high >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True), top)
        keys = tl.where(experts == expert, -(2 ** 63), keys)
    e = tl.exp(top - tl.max(top, axis=0))
    return ids, e / tl.sum(e, axis=0)


@triton.jit
def _gate_up_kernel(x_ptr, logits_ptr, w_ptr, s_ptr, h_ptr, ids_ptr, E: tl.constexpr, EP: tl.constexpr,
                    K: tl.constexpr, KP: tl.constexpr, H: tl.constexpr, INTER: tl.constexpr, BLOCK: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, NATIVE_FP8: tl.constexpr):
    slot = tl.program_id(0)
    tile = tl.program_id(1)
    ids, top = _route(logits_ptr, E, EP, K, KP)
    slots = tl.arange(0, KP)
    tl.store(ids_ptr + slots, ids, mask=(slots < K) & (slot == 0) & (tile == 0))
    expert = tl.sum(tl.where(slots == slot, ids, 0), axis=0)
    weight = tl.sum(tl.where(slots == slot, top, 0.0), axis=0)
    rows = tile * BN + tl.arange(0, BN)  # a BN-row tile lies inside one FP8 row block
    blocks = tl.arange(0, BK // BLOCK)
    cols = tl.arange(0, BLOCK)
    w = w_ptr + expert.to(tl.int64) * (2 * INTER * H)
    s = s_ptr + expert * ((2 * INTER // BLOCK) * (H // BLOCK))
    gate_scales = s + (tile * BN // BLOCK) * (H // BLOCK)
    up_scales = s + ((INTER + tile * BN) // BLOCK) * (H // BLOCK)
    gate = tl.zeros((BN,), tl.float32)
    up = tl.zeros((BN,), tl.float32)
    for c in tl.static_range(H // BK):  # (BN, BK // BLOCK, BLOCK) tiles: one scale per (row, block)
        k = c * BK + blocks[:, None] * BLOCK + cols[None, :]
        x = tl.load(x_ptr + k).to(tl.float32)[None]
        wg = fp8_e4m3(tl.load(w + rows[:, None, None] * H + k[None]), NATIVE_FP8)
        wu = fp8_e4m3(tl.load(w + (INTER + rows[:, None, None]) * H + k[None]), NATIVE_FP8)
        gate += tl.sum(tl.sum(wg * x, axis=2) * tl.load(gate_scales + c * (BK // BLOCK) + blocks)[None], axis=1)
        up += tl.sum(tl.sum(wu * x, axis=2) * tl.load(up_scales + c * (BK // BLOCK) + blocks)[None], axis=1)
    tl.store(h_ptr + slot * INTER + rows, gate / (1.0 + tl.exp(-gate)) * up * weight)


@triton.jit
def _down_kernel(h_ptr, ids_ptr, w_ptr, s_ptr, shared_gate_ptr, shared_up_ptr, shared_scale_ptr, shared_down_ptr,
                 res_ptr, y_ptr, K: tl.constexpr, KP: tl.constexpr, H: tl.constexpr, INTER: tl.constexpr,
                 SHARED: tl.constexpr, BLOCK: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SBK: tl.constexpr,
                 NATIVE_FP8: tl.constexpr, RESIDUAL: tl.constexpr):
    tile = tl.program_id(0)
    rows = tile * BN + tl.arange(0, BN)  # inside one FP8 row block
    slots = tl.arange(0, KP)
    used = slots < K
    ids = tl.load(ids_ptr + slots, mask=used, other=0)
    # every chunk's loads before the first reduction, whose barrier would hold the next chunk's back: first the
    # shared expert's (they need no expert ids), then the routed experts'
    shared_gates, shared_ups, shared_tiles = (), (), ()
    for c in tl.static_range(SHARED // SBK):
        j = c * SBK + tl.arange(0, SBK)
        shared_gates = shared_gates + (tl.load(shared_gate_ptr + j),)
        shared_ups = shared_ups + (tl.load(shared_up_ptr + j),)
        shared_tiles = shared_tiles + (tl.load(shared_down_ptr + rows[:, None] * SHARED + j[None, :]),)
    gate = tl.load(shared_scale_ptr).to(tl.float32)
    if RESIDUAL:
        res = tl.load(res_ptr + rows)
    w = w_ptr + ids.to(tl.int64) * (H * INTER)
    scales = s_ptr + ids * ((H // BLOCK) * (INTER // BLOCK)) + (tile * BN // BLOCK) * (INTER // BLOCK)
    hs, tile_s, tiles = (), (), ()
    for c in tl.static_range(INTER // BK):  # (BN, KP, BK) tiles inside one FP8 column block; slots over warps
        j = c * BK + tl.arange(0, BK)
        hs = hs + (tl.load(h_ptr + slots[:, None] * INTER + j[None, :], mask=used[:, None], other=0.0),)
        tile_s = tile_s + (tl.load(scales + c * BK // BLOCK),)
        tiles = tiles + (tl.load(w[None, :, None] + rows[:, None, None] * INTER + j[None, None, :]),)
    shared = tl.zeros((BN,), tl.float32)
    for c in tl.static_range(SHARED // SBK):
        g = shared_gates[c].to(tl.float32)
        hs_c = g / (1.0 + tl.exp(-g)) * shared_ups[c].to(tl.float32)
        shared += tl.sum(shared_tiles[c].to(tl.float32) * hs_c[None], axis=1)
    out = shared / (1.0 + tl.exp(-gate))
    for c in tl.static_range(INTER // BK):
        hw = hs[c] * tile_s[c][:, None]  # h (weighted by A) times each expert's tile scale
        out += tl.sum(tl.sum(fp8_e4m3(tiles[c], NATIVE_FP8) * hw[None], axis=2), axis=1)
    dt = y_ptr.dtype.element_ty
    if RESIDUAL:
        out = res.to(tl.float32) + out.to(dt).to(tl.float32)
    tl.store(y_ptr + rows, out.to(dt))


def _tile(size: int, limit: int) -> int:
    """The largest power of two up to `limit` that divides `size`."""
    tile = min(limit, triton.next_power_of_2(size))
    while size % tile:
        tile //= 2
    return tile


def fused_moe_decode(x: torch.Tensor, logits: torch.Tensor, shared_gate: torch.Tensor, shared_up: torch.Tensor,
                     shared_scale: torch.Tensor, w: MoEWeights, cfg: BackboneConfig,
                     residual: torch.Tensor | None = None) -> torch.Tensor:
    """decode_moe.moe_decode from the outputs of w.proj(x) on: (1, hidden) -> (1, hidden) in x's dtype; given the
    residual stream (1, hidden), residual + that output."""
    res = x if residual is None else residual  # unread without a residual
    if not all(t.is_contiguous() for t in (x, res, logits, shared_gate, shared_up, w.gate_up, w.down, w.shared_down)):
        raise ValueError("fused_moe_decode reads the activations and weights as contiguous arrays")
    E, k, h, inter, block = cfg.num_experts, cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size, \
        cfg.fp8_block
    shared = cfg.shared_expert_intermediate_size
    bn, dbn = min(BLOCK_N, block), min(DOWN_BLOCK_N, block)
    bk = max(block, _tile(h, BLOCK_K))  # whole FP8 blocks
    hidden = torch.empty((k, inter), dtype=torch.float32, device=x.device)
    ids = torch.empty(k, dtype=torch.int32, device=x.device)
    out = torch.empty_like(x)
    native, kp = x.is_cuda, triton.next_power_of_2(k)
    _gate_up_kernel[(k, inter // bn)](x, logits, w.gate_up, w.gate_up_scale, hidden, ids, E,
                                      triton.next_power_of_2(E), k, kp, h, inter, block, bn, bk, native,
                                      num_warps=NUM_WARPS)
    _down_kernel[(h // dbn,)](hidden, ids, w.down, w.down_scale, shared_gate, shared_up, shared_scale, w.shared_down,
                              res, out, k, kp, h, inter, shared, block, dbn, min(block, _tile(inter, DOWN_BLOCK_K)),
                              _tile(shared, DOWN_BLOCK_K), native, residual is not None, num_warps=DOWN_WARPS)
    return out
