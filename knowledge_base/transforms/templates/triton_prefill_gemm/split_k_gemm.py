"""x @ w.T for the prefill's projections whose output is narrow next to their depth (back to the 2048-wide residual
from 4096-6144 inputs: DeltaNet's and attention's out_proj, the tower's eh_proj, o_proj and MLP down) as a split-K
Triton GEMM. At a prompt's 64-224 rows such a GEMM has few output tiles, and cuBLAS gives each SM one tile to walk
the whole depth alone (session 33's H100 profile of the voice prefill: 79 launches of 64x64 tiles, 14.6 us each).
Split in SPLIT slices of the depth, there are SPLIT times as many programs; a second kernel sums the slices' fp32
partials in slice order (no atomics: every run gives the same bits) and rounds once to the output's dtype.
Rows and columns past the tiles' last whole one read the last row or column instead of a masked load (which would
hold back the loads' pipelining); only the stores are masked.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M"])  # N and K as arguments: one compile serves every projection's shape
def _partial_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_x, SPLIT: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
    """Program (tile, slice): the (BLOCK_M, BLOCK_N) tile's product over the slice's K / SPLIT inputs, stored as
    fp32 partials (SPLIT, M, N), or with one slice as the output itself."""
    tile, part = tl.program_id(0), tl.program_id(1)
    tm, tn = tile // tl.cdiv(N, BLOCK_N), tile % tl.cdiv(N, BLOCK_N)
    rm = tm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = part * (K // SPLIT) + tl.arange(0, BLOCK_K)
    x = x_ptr + tl.minimum(rm, M - 1)[:, None] * stride_x + rk[None, :]
    w = w_ptr + tl.minimum(rn, N - 1)[None, :] * K + rk[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for _ in range(0, K // SPLIT, BLOCK_K):
        if IEEE:  # fp32 inputs (the CPU tests: the interpreter multiplies no bf16) in full precision, not TF32
            acc += tl.dot(tl.load(x), tl.load(w), input_precision="ieee")
        else:
            acc = tl.dot(tl.load(x), tl.load(w), acc)
        x += BLOCK_K
        w += BLOCK_K
    offsets = part * M * N + rm[:, None] * N + rn[None, :]
    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit(do_not_specialize=["total"])
def _sum_kernel(partials_ptr, out_ptr, total, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for part in tl.static_range(SPLIT):
        acc += tl.load(partials_ptr + part * total + i, mask=i < total, other=0.0)
    tl.store(out_ptr + i, acc.to(out_ptr.dtype.element_ty), mask=i < total)


def fits(w: torch.Tensor, split: int, block_k: int) -> bool:
    """Whether split_k_linear takes weights of w's depth in this many slices of whole BLOCK_K steps."""
    return w.shape[1] % (split * block_k) == 0


def split_k_linear(x: torch.Tensor, w: torch.Tensor, split: int, block_m: int, block_n: int, block_k: int,
                   num_warps: int, num_stages: int, sum_block: int = 1024) -> torch.Tensor:
    """x (M, K) @ w (N, K).T -> (M, N) in x's dtype; x's rows may be strided, its columns and w contiguous."""
    (m, k), n = x.shape, w.shape[0]
    assert w.shape[1] == k and x.stride(1) == 1 and w.is_contiguous() and fits(w, split, block_k)
    out = x.new_empty((m, n))
    partials = out if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), split)
    _partial_kernel[grid](x, w, partials, m, n, k, x.stride(0), split, block_m, block_n, block_k,
                          x.dtype == torch.float32, num_warps=num_warps, num_stages=num_stages)
    if split > 1:
        _sum_kernel[(triton.cdiv(m * n, sum_block),)](partials, out, m * n, split, sum_block, num_warps=4)
    return out
