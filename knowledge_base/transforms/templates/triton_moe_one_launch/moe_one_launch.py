"""triton_moe_fused's two decode kernels as one launch, because each graphed launch costs ~2 us of gap, ramp and
drain whatever it reads (docs/benchmarks.md, session 16's fit) and the down kernel could not load a weight until
the gate|up kernel had ended. The first k * I / BLOCK_N programs are the gate|up tiles; each counts itself done
on an int32 (a release after its h tile is stored). The rest are the down tiles: each routes itself from the
router logits (as every gate|up program does), issues all its weight loads, then waits for the count and reads h.
Programs start in id order, so every gate|up program is running or done before any down program can wait: no
down program waits on one that has no SM. The last down program to finish zeroes the count for the next launch.
The arithmetic is triton_moe_fused's, op for op: with the same tiles and warps the output equals its two
kernels' bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.config import BackboneConfig

from .decode_weights import MoEWeights
from .fused_moe import _down_tile, _gate_up_tile, _route, _tile
from .moe_block import norm_projection
from .moe_one_launch_params import BLOCK_K, BLOCK_N, DOWN_BLOCK_K, DOWN_BLOCK_N, NUM_WARPS


@triton.jit
def _moe_kernel(x_ptr, logits_ptr, gate_up_ptr, gate_up_s_ptr, h_ptr, down_ptr, down_s_ptr, shared_gate_ptr,
                shared_up_ptr, shared_scale_ptr, shared_down_ptr, res_ptr, y_ptr, sync_ptr, E: tl.constexpr,
                EP: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, H: tl.constexpr, INTER: tl.constexpr,
                SHARED: tl.constexpr, BLOCK: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, DBN: tl.constexpr,
                DBK: tl.constexpr, SBK: tl.constexpr, NATIVE_FP8: tl.constexpr, RESIDUAL: tl.constexpr):
    program = tl.program_id(0)
    tiles: tl.constexpr = INTER // BN
    writers: tl.constexpr = K * tiles
    readers: tl.constexpr = H // DBN
    ids, top = _route(logits_ptr, E, EP, K, KP)
    if program < writers:
        _gate_up_tile(x_ptr, gate_up_ptr, gate_up_s_ptr, h_ptr, ids, top, program // tiles, program % tiles, KP, H,
                      INTER, BLOCK, BN, BK, NATIVE_FP8)
        tl.debug_barrier()  # every thread's h stores precede the release
        tl.atomic_add(sync_ptr, 1, sem="release")
    else:
        _down_tile(h_ptr, ids, down_ptr, down_s_ptr, shared_gate_ptr, shared_up_ptr, shared_scale_ptr,
                   shared_down_ptr, res_ptr, y_ptr, sync_ptr, writers, program - writers, K, KP, H, INTER, SHARED,
                   BLOCK, DBN, DBK, SBK, NATIVE_FP8, RESIDUAL, True)
        # every down program has seen the full count once `readers` of them are done: the last one resets both
        finished = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
        if finished == readers - 1:
            tl.atomic_xchg(sync_ptr, 0)
            tl.atomic_xchg(sync_ptr + 1, 0)


def moe_one_launch(x: torch.Tensor, logits: torch.Tensor, shared_gate: torch.Tensor, shared_up: torch.Tensor,
                   shared_scale: torch.Tensor, w: MoEWeights, cfg: BackboneConfig, residual: torch.Tensor,
                   sync: torch.Tensor) -> torch.Tensor:
    """fused_moe.fused_moe_decode(..., residual) in one launch: residual + the MoE of x, (1, hidden) in x's dtype.
    sync: two int32 zeros that this launch leaves zero, owned by one stream of launches (a launch running beside
    another on the same pair would count the other's tiles)."""
    if not all(t.is_contiguous() for t in (x, residual, logits, shared_gate, shared_up, w.gate_up, w.down,
                                           w.shared_down)):
        raise ValueError("moe_one_launch reads the activations and weights as contiguous arrays")
    if sync.dtype != torch.int32 or sync.numel() != 2 or not sync.is_contiguous():
        raise ValueError("moe_one_launch needs its own contiguous pair of int32 counters, zero before the launch")
    E, k, h, inter, block = cfg.num_experts, cfg.num_experts_per_tok, cfg.hidden_size, cfg.moe_intermediate_size, \
        cfg.fp8_block
    shared = cfg.shared_expert_intermediate_size
    bn, dbn = min(BLOCK_N, block), min(DOWN_BLOCK_N, block)
    hidden = torch.empty((k, inter), dtype=torch.float32, device=x.device)
    out = torch.empty_like(x)
    grid = (k * inter // bn + h // dbn,)
    _moe_kernel[grid](x, logits, w.gate_up, w.gate_up_scale, hidden, w.down, w.down_scale, shared_gate, shared_up,
                      shared_scale, w.shared_down, residual, out, sync, E, triton.next_power_of_2(E), k,
                      triton.next_power_of_2(k), h, inter, shared, block, bn, max(block, _tile(h, BLOCK_K)), dbn,
                      min(block, _tile(inter, DOWN_BLOCK_K)), _tile(shared, DOWN_BLOCK_K), x.is_cuda, True,
                      num_warps=NUM_WARPS)
    return out


def moe_block(x: torch.Tensor, gain: torch.Tensor, w: MoEWeights, cfg: BackboneConfig,
              sync: torch.Tensor) -> torch.Tensor:
    """moe_block.moe_block with the experts in one launch on the layer's counters `sync`."""
    h, proj = norm_projection(x, gain, w, cfg)
    return moe_one_launch(h, *proj, w, cfg, x, sync)
