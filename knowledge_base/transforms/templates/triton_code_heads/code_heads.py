"""A residual code's whole step after its tower layer as one Triton kernel, where the graphed frame ran ~6 torch
kernels and a draw per code (9 per frame):
- the head's GEMV over the codec's codebook rows only (1024 of the head's 4096 at full size: a code past the
  codebook is never drawn, so its logit is never needed; 12.6 of 16.8 MB per head not read), rounded to the
  activation dtype and written as float32 straight into the frame's code-logit row (`F.linear(...).float()`);
- the draw (triton_sampling's race, same noise slot and filters) by the last program to finish (an arrival
  ticket), reading the row back from L2;
- the teacher-forced code in place of the drawn one where the frame is forced;
- the next tower layer's code embedding (its table's row of that code, times the semantic flag), which the
  next layer's entry GEMV reads, so no embedding lookup or scaling kernel runs between the layers.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.api import SamplingParams

from .code_heads_params import BLOCK_K, BLOCK_N, NUM_WARPS
from .triton_sampling import _race, _race_args
from .triton_tower import _last


@triton.jit
def _head_draw_kernel(x_ptr, w_ptr, logits_ptr, slot_ptr, use_ptr, force_ptr, code_ptr, table_ptr, scale_ptr, e_ptr,
                      ticket_ptr, valid_size, temperature, top_p, top_k, GREEDY: tl.constexpr,
                      HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, PRECISE_LOG: tl.constexpr, NEXT: tl.constexpr,
                      K: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN, BK), tl.float32)  # reduced once after the last chunk, as triton_tower's residual GEMVs
    for c in tl.static_range(K // BK):
        cols = c * BK + tl.arange(0, BK)
        acc += tl.load(w_ptr + rows[:, None] * K + cols[None, :]).to(tl.float32) * \
            tl.load(x_ptr + cols).to(tl.float32)[None, :]
    tl.store(logits_ptr + rows, tl.sum(acc, axis=1).to(x_ptr.dtype.element_ty).to(tl.float32))
    if _last(ticket_ptr, tl.num_programs(0)):
        offs = tl.arange(0, BLOCK)
        logits = tl.load(logits_ptr + offs, mask=offs < valid_size, other=float("-inf"), cache_modifier=".cg")
        drawn = _race(logits, offs, slot_ptr, temperature, top_p, top_k, GREEDY, HAS_TOP_K, HAS_TOP_P, False,
                      PRECISE_LOG, BLOCK)
        code = tl.where(tl.load(use_ptr) != 0, tl.load(force_ptr), drawn.to(tl.int64))
        tl.store(code_ptr, code)
        if NEXT:
            scale = tl.load(scale_ptr).to(tl.float32)  # 0 or 1: the product is the embedding's value or 0
            for c in tl.static_range(K // BK):
                cols = c * BK + tl.arange(0, BK)
                row = tl.load(table_ptr + code * K + cols).to(tl.float32) * scale
                tl.store(e_ptr + cols, row.to(e_ptr.dtype.element_ty))


class CodeHeads:
    """The chain's fixed-address buffers (captured graphs keep their addresses): the drawn codes, the next layer's
    code embedding and the arrival ticket. Code logits past the codebook read -inf: they are never drawn."""

    def __init__(self, heads: list[torch.Tensor], valid_size: int, code_logits: torch.Tensor) -> None:
        hidden = heads[0].shape[1]
        self.bn, self.bk = min(BLOCK_N, valid_size), min(BLOCK_K, hidden)  # the tiles, capped to the dims
        if valid_size % self.bn or hidden % self.bk or any(not h.is_contiguous() for h in heads):
            raise ValueError(f"triton_code_heads: {valid_size} codebook rows and hidden size {hidden} must split into "
                             f"blocks of {self.bn} rows and {self.bk} columns, and the heads must be contiguous")
        self.heads = [h[:valid_size] for h in heads]  # row-major: the codebook's rows are a contiguous prefix
        self.valid_size, self.logits = valid_size, code_logits
        device, dtype = heads[0].device, heads[0].dtype
        code_logits[:, valid_size:] = float("-inf")
        self.codes = torch.zeros(len(heads), dtype=torch.long, device=device)
        self.e = torch.zeros((1, hidden), dtype=dtype, device=device)
        self.ticket = torch.zeros(1, dtype=torch.int32, device=device)

    def draw(self, k: int, x: torch.Tensor, params: SamplingParams, slot: torch.Tensor, use: torch.Tensor,
             force: torch.Tensor, scale: torch.Tensor, next_table: torch.Tensor | None) -> torch.Tensor:
        """Code k (1-based) from the tower output x (1, hidden): logits into row k - 1, the code (0-d, forced where
        `use`) into self.codes, and with next_table, next_table[code] * scale into self.e."""
        if not x.is_contiguous():
            raise ValueError("triton_code_heads reads the tower output as a contiguous row")
        valid = self.valid_size
        top_k = min(params.code_top_k, valid) if params.code_top_k > 0 else valid
        args, flags = _race_args(params.code_temperature, params.code_top_p, top_k, valid)
        block = triton.next_power_of_2(valid)
        code = self.codes[k - 1]
        table = x if next_table is None else next_table  # unread without a next layer
        _head_draw_kernel[(valid // self.bn,)](
            x, self.heads[k - 1], self.logits[k - 1], slot, use, force, code, table, scale, self.e, self.ticket, valid,
            *args, *flags, x.is_cuda, next_table is not None, x.shape[-1], self.bn, self.bk, block,
            num_warps=NUM_WARPS)
        return code
