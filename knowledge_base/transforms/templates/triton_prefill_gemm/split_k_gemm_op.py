"""triton_prefill_gemm's call as a custom op: to torch.compile (the compiled prefill) the split-K GEMM is one opaque
node of known output shape; called eagerly, or replayed from a CUDA graph, the op is its function, which picks the
slices for the call's rows (each bucket's graph captures its own). Triton is imported only when the op runs. The
namespace is the package's name: several engine packages may be loaded in one process.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from .prefill_gemm_params import BLOCK_K, BLOCK_M, BLOCK_N, MAX_SPLIT, NUM_STAGES, NUM_WARPS, PROGRAMS

_NAMESPACE = __package__.replace(".", "_")


def slices(rows: int, n: int, k: int) -> int:
    """The most slices of the depth (a power of two up to MAX_SPLIT, each whole BLOCK_K steps) that keep the
    programs within PROGRAMS: few rows have few output tiles, so they take more slices."""
    tiles = -(-rows // BLOCK_M) * -(-n // BLOCK_N)
    split = 1
    while split < MAX_SPLIT and tiles * split * 2 <= PROGRAMS and k % (split * 2 * BLOCK_K) == 0:
        split *= 2
    return split


@torch.library.custom_op(f"{_NAMESPACE}::split_k_linear", mutates_args=())
def split_k_linear_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (M, K) @ w (N, K).T through the split-K kernel."""
    from .split_k_gemm import split_k_linear

    x = x if x.stride(1) == 1 else x.contiguous()  # the kernel reads rows at any stride, columns at unit stride
    return split_k_linear(x, w, slices(x.shape[0], *w.shape), BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES)


@split_k_linear_op.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[0]))


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """F.linear(x, w) of a 2-D x: the split-K kernel on CUDA (and under TRITON_INTERPRET=1, the CPU tests) where
    whole BLOCK_K steps cover w's depth, F.linear elsewhere."""
    if (x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") and w.is_contiguous() and w.shape[1] % BLOCK_K == 0:
        return split_k_linear_op(x, w)
    return F.linear(x, w)
