"""The routed experts of many tokens (a prefill) as two grouped Triton GEMMs over the block-FP8 expert stacks:
(token, slot) pairs are grouped by expert into blocks of BLOCK_M pairs that share one expert, so each used
expert's FP8 tiles are read once per block (not once per token) and multiplied on the tensor cores with tl.dot.
(1) gate|up over 128-wide K blocks, each partial product times its tile scale, then silu(gate) * up;
(2) down, times the pair's routing weight; (3) a token's k slots summed. fp32 accumulation.
The block layout is built on the device by one kernel (a histogram, a scan and atomic tickets), so there is
no host sync; the launch grid depends only on the token count and the kernels compile once (no shape is a
compile-time constant but the model's).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .fp8_bits import fp8_e4m3
from .grouped_moe_params import BLOCK_M, BLOCK_N, BLOCK_N_LONG, LONG_ROWS, NUM_WARPS


@triton.jit
def _gate_up_kernel(x_ptr, pairs_ptr, experts_ptr, w_ptr, s_ptr, h_ptr, K_SLOTS: tl.constexpr, H: tl.constexpr,
                    INTER: tl.constexpr, BLOCK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                    NATIVE_FP8: tl.constexpr, IEEE: tl.constexpr):
    block = tl.program_id(0)
    tile = tl.program_id(1)
    expert = tl.load(experts_ptr + block)
    if expert >= 0:  # blocks past the used ones hold no pairs
        slots = block * BM + tl.arange(0, BM)
        pair = tl.load(pairs_ptr + slots)
        token = tl.where(pair >= 0, pair // K_SLOTS, 0)
        rows = tile * BN + tl.arange(0, BN)
        cols = tl.arange(0, BLOCK)
        w = w_ptr + expert.to(tl.int64) * (2 * INTER * H)
        s = s_ptr + expert * ((2 * INTER // BLOCK) * (H // BLOCK))
        gate_scales = s + (tile * BN // BLOCK) * (H // BLOCK)  # a BN-row tile lies inside one scale block
        up_scales = s + ((INTER + tile * BN) // BLOCK) * (H // BLOCK)
        gate = tl.zeros((BM, BN), tl.float32)
        up = tl.zeros((BM, BN), tl.float32)
        for kb in range(H // BLOCK):
            x = tl.load(x_ptr + token[:, None] * H + kb * BLOCK + cols[None, :], mask=(pair >= 0)[:, None],
                        other=0.0)
            wg = fp8_e4m3(tl.load(w + rows[None, :] * H + kb * BLOCK + cols[:, None]), NATIVE_FP8).to(x.dtype)
            wu = fp8_e4m3(tl.load(w + (INTER + rows[None, :]) * H + kb * BLOCK + cols[:, None]),
                          NATIVE_FP8).to(x.dtype)
            if IEEE:
                gate += tl.dot(x, wg, input_precision="ieee") * tl.load(gate_scales + kb)
                up += tl.dot(x, wu, input_precision="ieee") * tl.load(up_scales + kb)
            else:
                gate += tl.dot(x, wg) * tl.load(gate_scales + kb)
                up += tl.dot(x, wu) * tl.load(up_scales + kb)
        h = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(h_ptr + slots[:, None] * INTER + rows[None, :], h.to(h_ptr.dtype.element_ty))


@triton.jit
def _down_kernel(h_ptr, pairs_ptr, experts_ptr, top_ptr, w_ptr, s_ptr, y_ptr, H: tl.constexpr, INTER: tl.constexpr,
                 BLOCK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, NATIVE_FP8: tl.constexpr,
                 IEEE: tl.constexpr):
    block = tl.program_id(0)
    tile = tl.program_id(1)
    expert = tl.load(experts_ptr + block)
    if expert >= 0:
        slots = block * BM + tl.arange(0, BM)
        pair = tl.load(pairs_ptr + slots)
        rows = tile * BN + tl.arange(0, BN)
        cols = tl.arange(0, BLOCK)
        w = w_ptr + expert.to(tl.int64) * (H * INTER)
        scales = s_ptr + expert * ((H // BLOCK) * (INTER // BLOCK)) + (tile * BN // BLOCK) * (INTER // BLOCK)
        y = tl.zeros((BM, BN), tl.float32)
        for kb in range(INTER // BLOCK):
            h = tl.load(h_ptr + slots[:, None] * INTER + kb * BLOCK + cols[None, :])
            wd = fp8_e4m3(tl.load(w + rows[None, :] * INTER + kb * BLOCK + cols[:, None]), NATIVE_FP8).to(h.dtype)
            if IEEE:
                y += tl.dot(h, wd, input_precision="ieee") * tl.load(scales + kb)
            else:
                y += tl.dot(h, wd) * tl.load(scales + kb)
        weight = tl.load(top_ptr + pair, mask=pair >= 0, other=0.0)
        tl.store(y_ptr + pair[:, None] * H + rows[None, :], y * weight[:, None], mask=(pair >= 0)[:, None])


@triton.jit
def _layout_kernel(experts_ptr, cursor_ptr, slot_pairs_ptr, block_experts_ptr, pairs, num_blocks, E: tl.constexpr,
                   BM: tl.constexpr, CHUNK: tl.constexpr):
    """One program lays the pairs out: each expert's pairs fill ceil(count / BM) consecutive blocks, the experts'
    runs in id order. A pair's slot in its expert's run is a ticket from an atomic counter, not its rank in a sort:
    each row of a tl.dot is its own sum, so the order of the pairs inside a run changes no result. The program runs
    its steps one after another, so each is a few wide passes: the block owners are written expert-parallel, one
    pass per block of the longest run (1-2 at prompt sizes), not by comparing every block with every run's end."""
    # while loops, not range(pairs): Triton 3.6's interpreter (the CPU tests) cannot index a runtime int
    experts = tl.arange(0, E)
    counts = tl.zeros((E,), tl.int32)
    start = 0
    while start < pairs:
        offs = start + tl.arange(0, CHUNK)
        expert = tl.load(experts_ptr + offs, mask=offs < pairs, other=-1).to(tl.int32)
        counts += tl.histogram(expert, E, mask=expert >= 0)  # -1: a pair routed to no expert takes no slot
        start += CHUNK
    runs = (counts + BM - 1) // BM * BM
    ends = tl.cumsum(runs, 0)
    used = tl.sum(runs)
    tl.store(cursor_ptr + experts, ends - runs)
    start = 0
    while start < num_blocks * BM:
        offs = start + tl.arange(0, CHUNK)
        tl.store(slot_pairs_ptr + offs, -1, mask=offs < num_blocks * BM)
        start += CHUNK
    own = runs // BM
    firsts = (ends - runs) // BM
    longest = tl.max(own, 0)
    j = 0
    while j < longest:
        tl.store(block_experts_ptr + firsts + j, experts, mask=j < own)
        j += 1
    start = used // BM
    while start < num_blocks:
        blocks = start + tl.arange(0, CHUNK)
        tl.store(block_experts_ptr + blocks, -1, mask=blocks < num_blocks)
        start += CHUNK
    tl.debug_barrier()  # the run starts and the -1 fill are stored before a ticket is taken or a slot written
    start = 0
    while start < pairs:
        offs = start + tl.arange(0, CHUNK)
        expert = tl.load(experts_ptr + offs, mask=offs < pairs, other=-1).to(tl.int32)
        live = expert >= 0
        slot = tl.atomic_add(cursor_ptr + expert, 1, mask=live)
        tl.store(slot_pairs_ptr + slot, offs, mask=live)
        start += CHUNK


@triton.jit
def _combine_kernel(y_ptr, experts_ptr, out_ptr, H: tl.constexpr, K_SLOTS: tl.constexpr, BH: tl.constexpr):
    """out[t] = the sum of the token's k slot outputs, slot by slot; a slot routed to no expert adds nothing (its
    row of y was never written)."""
    token = tl.program_id(0)
    cols = tl.program_id(1) * BH + tl.arange(0, BH)
    acc = tl.zeros((BH,), tl.float32)
    for s in tl.static_range(K_SLOTS):
        pair = token * K_SLOTS + s
        routed = tl.load(experts_ptr + pair) >= 0
        acc += tl.load(y_ptr + pair * H + cols, mask=routed & (cols < H), other=0.0)
    tl.store(out_ptr + token * H + cols, acc, mask=cols < H)


def _blocks(experts: torch.Tensor, num_experts: int, bm: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert ids (T, k) -> (pair index per padded slot (num_blocks * bm,), -1 = padding; expert per block
    (num_blocks,), -1 = unused), both int32. num_blocks is the bound ceil(T k / bm) + min(E, T k), so no count
    has to be read back to the host. One kernel launch: the sort, scans, gathers and scatters it replaced were 23
    launches per layer of the prefill graph."""
    flat = experts.flatten()
    pairs = flat.numel()
    num_blocks = -(-pairs // bm) + min(num_experts, pairs)
    bins = triton.next_power_of_2(num_experts)  # ids < num_experts: the extra bins stay empty
    cursor = torch.empty(bins, dtype=torch.int32, device=flat.device)
    slot_pairs = torch.empty(num_blocks * bm, dtype=torch.int32, device=flat.device)
    block_experts = torch.empty(num_blocks, dtype=torch.int32, device=flat.device)
    # 16 warps, chunks of 2048: 8.8 us for the voice prompt's 1672 pairs and 6.0 us for hello's 416 on the H200, where
    # 4 warps took 15.2 and 6.0 (scripts/gpu_prefill_bench.py, session 23)
    _layout_kernel[(1,)](flat, cursor, slot_pairs, block_experts, pairs, num_blocks, bins, bm, 2048, num_warps=16)
    return slot_pairs, block_experts


def grouped_fp8_experts(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, gate_up: torch.Tensor,
                        gate_up_scale: torch.Tensor, down: torch.Tensor, down_scale: torch.Tensor,
                        block: int) -> torch.Tensor:
    """sum over slots of weights[t, s] * expert_{experts[t, s]}(x[t]): x (T, H), weights fp32 and experts (T, k),
    FP8 stacks gate_up (E, 2I, H) and down (E, H, I) with their (E, rows/block, cols/block) scales
    -> (T, H) fp32. An expert id of -1 routes the slot to no expert: it adds nothing and reads no weights (a
    prefill's padding rows)."""
    T, k = experts.shape
    E, two_inter, H = gate_up.shape
    inter = two_inter // 2
    # a long prompt's rows reach nearly every expert with several pairs each: wider tiles read each expert's rows
    # in fewer, longer programs; a short one's 1-3 pairs an expert want more programs in flight
    bn = min(BLOCK_N_LONG if T >= LONG_ROWS else BLOCK_N, block)
    if block % bn or inter % bn or H % bn or block < 16:
        raise ValueError(f"grouped_fp8_experts: block {block} must be >= 16 and BLOCK_N {bn} must divide it, "
                         f"the hidden size {H} and the expert width {inter}")
    if not (x.is_contiguous() and gate_up.is_contiguous() and down.is_contiguous()):
        raise ValueError("grouped_fp8_experts indexes x and the expert stacks as contiguous arrays")
    slot_pairs, block_experts = _blocks(experts, E, BLOCK_M)
    hidden = torch.empty((slot_pairs.numel(), inter), dtype=x.dtype, device=x.device)
    y = torch.empty((T * k, H), dtype=torch.float32, device=x.device)
    native, ieee = x.is_cuda, x.dtype == torch.float32
    grid = (block_experts.numel(),)
    _gate_up_kernel[grid + (inter // bn,)](x, slot_pairs, block_experts, gate_up.view(torch.uint8), gate_up_scale,
                                           hidden, k, H, inter, block, BLOCK_M, bn, native, ieee,
                                           num_warps=NUM_WARPS)
    _down_kernel[grid + (H // bn,)](hidden, slot_pairs, block_experts, weights.contiguous().view(-1),
                                    down.view(torch.uint8), down_scale, y, H, inter, block, BLOCK_M, bn, native, ieee,
                                    num_warps=NUM_WARPS)
    out = torch.empty((T, H), dtype=torch.float32, device=x.device)
    bh = min(1024, triton.next_power_of_2(H))
    _combine_kernel[(T, triton.cdiv(H, bh))](y, experts.contiguous(), out, H, k, bh)
    return out
