"""The routed experts of one token in two Triton kernels reading the block-FP8 weights in place (no gather, no
dequantised copy): (1) per selected expert and tile of intermediate rows, gate and up GEMVs over 128-wide
K blocks, each block's partial sum times its 128x128 tile scale, then silu(gate) * up; (2) per tile of output
rows, the down GEMVs of DOWN_SLOTS of the k experts, weighted by the routing weights and summed (then the
k / DOWN_SLOTS partial sums are added). fp32 throughout.
The fp8 bytes convert as fp8_bits.fp8_e4m3 says.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from reference_runtime.config import BackboneConfig

from .decode_weights import MoEWeights
from .fp8_bits import fp8_e4m3
from .triton_moe_params import BLOCK_N, DOWN_SLOTS, NUM_WARPS


@triton.jit
def _gate_up_kernel(x_ptr, ids_ptr, w_ptr, s_ptr, h_ptr, H: tl.constexpr, INTER: tl.constexpr,
                    BLOCK: tl.constexpr, BN: tl.constexpr, NATIVE_FP8: tl.constexpr):
    slot = tl.program_id(0)
    tile = tl.program_id(1)
    expert = tl.load(ids_ptr + slot)
    rows = tile * BN + tl.arange(0, BN)
    cols = tl.arange(0, BLOCK)
    w = w_ptr + expert * (2 * INTER * H)
    s = s_ptr + expert * ((2 * INTER // BLOCK) * (H // BLOCK))
    gate_scales = s + (tile * BN // BLOCK) * (H // BLOCK)  # a BN-row tile lies inside one 128-row scale block
    up_scales = s + ((INTER + tile * BN) // BLOCK) * (H // BLOCK)
    gate = tl.zeros((BN,), tl.float32)
    up = tl.zeros((BN,), tl.float32)
    for kb in range(H // BLOCK):
        x = tl.load(x_ptr + kb * BLOCK + cols).to(tl.float32)[None, :]
        wg = fp8_e4m3(tl.load(w + rows[:, None] * H + kb * BLOCK + cols[None, :]), NATIVE_FP8)
        wu = fp8_e4m3(tl.load(w + (INTER + rows[:, None]) * H + kb * BLOCK + cols[None, :]), NATIVE_FP8)
        gate += tl.sum(wg * x, axis=1) * tl.load(gate_scales + kb)
        up += tl.sum(wu * x, axis=1) * tl.load(up_scales + kb)
    tl.store(h_ptr + slot * INTER + rows, gate / (1.0 + tl.exp(-gate)) * up)


@triton.jit
def _down_kernel(h_ptr, ids_ptr, top_ptr, w_ptr, s_ptr, y_ptr, H: tl.constexpr, INTER: tl.constexpr,
                 SLOTS: tl.constexpr, BLOCK: tl.constexpr, BN: tl.constexpr, NATIVE_FP8: tl.constexpr):
    group = tl.program_id(0)  # SLOTS consecutive selected experts, summed here; the groups are summed after
    tile = tl.program_id(1)
    rows = tile * BN + tl.arange(0, BN)
    cols = tl.arange(0, BLOCK)
    out = tl.zeros((BN,), tl.float32)
    for i in range(SLOTS):
        slot = group * SLOTS + i
        expert = tl.load(ids_ptr + slot)
        w = w_ptr + expert * (H * INTER)
        scales = s_ptr + expert * ((H // BLOCK) * (INTER // BLOCK)) + (tile * BN // BLOCK) * (INTER // BLOCK)
        y = tl.zeros((BN,), tl.float32)
        for kb in range(INTER // BLOCK):
            h = tl.load(h_ptr + slot * INTER + kb * BLOCK + cols)[None, :]
            wd = fp8_e4m3(tl.load(w + rows[:, None] * INTER + kb * BLOCK + cols[None, :]), NATIVE_FP8)
            y += tl.sum(wd * h, axis=1) * tl.load(scales + kb)
        out += y * tl.load(top_ptr + slot)
    tl.store(y_ptr + group * H + rows, out)


def triton_routed_experts(x: torch.Tensor, top: torch.Tensor, ids: torch.Tensor, w: MoEWeights,
                          cfg: BackboneConfig) -> torch.Tensor:
    """decode_moe.routed_experts, fused: (1, hidden) -> (1, hidden) fp32."""
    if not (w.gate_up.is_contiguous() and w.down.is_contiguous()):
        raise ValueError("triton_routed_experts indexes the expert stacks as contiguous (E, rows, cols) arrays")
    k, h, inter, block = ids.shape[0], cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block
    bn = min(BLOCK_N, block)
    hidden = torch.empty((k, inter), dtype=torch.float32, device=x.device)
    slots = math.gcd(DOWN_SLOTS, k)  # experts per down program: fewer = more programs in flight, plus a sum
    partial = torch.empty((k // slots, h), dtype=torch.float32, device=x.device)
    native = x.is_cuda
    _gate_up_kernel[(k, inter // bn)](x.reshape(-1), ids, w.gate_up, w.gate_up_scale, hidden, h, inter, block, bn,
                                      native, num_warps=NUM_WARPS)
    _down_kernel[(k // slots, h // bn)](hidden, ids, top.contiguous(), w.down, w.down_scale, partial, h, inter, slots,
                                        block, bn, native, num_warps=NUM_WARPS)
    return partial if slots == k else partial.sum(0, keepdim=True)
