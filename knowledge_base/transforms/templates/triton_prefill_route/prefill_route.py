"""The MoE router's top-k of many tokens (a prefill) in one Triton kernel per layer: from the router logits, the
softmax over the experts, the k largest probabilities renormalised to sum to 1 with their expert ids, and each
pick counted into the expert_counts diagnostic. SparseMoE.route and its count take a softmax, a topk, a division
and an index_add_: five to six launches per layer of the prefill graph, the topk alone ~10 us per layer of a
209-row prompt on the H200. Ties pick the lower expert id. A padded bucket's rows past the prompt go to no
expert (id -1), so the grouped experts read no weights for them. A custom op, so that torch.compile (the compiled
prefill) keeps it one opaque node, as prefill_ops.py does for the prefill's other Triton calls; the ops'
namespace is the package's name: several engine packages may be loaded in one process.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .prefill_route_params import NUM_WARPS, ROWS

_NAMESPACE = __package__.replace(".", "_")


@triton.jit
def _route_kernel(logits_ptr, weights_ptr, experts_ptr, counts_ptr, valid_ptr, T, stride, E: tl.constexpr,
                  EP: tl.constexpr, K: tl.constexpr, KP: tl.constexpr, ROWS: tl.constexpr, HAS_VALID: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, EP)
    slots = tl.arange(0, KP)
    live = rows < T
    routed = live
    if HAS_VALID:
        routed = rows < tl.load(valid_ptr)
    logits = tl.load(logits_ptr + rows[:, None] * stride + cols[None, :], mask=live[:, None] & (cols < E)[None, :],
                     other=float("-inf")).to(tl.float32)
    logits = tl.where(live[:, None], logits, 0.0)  # a row past T computes on zeros and is never stored
    p = tl.exp(logits - tl.max(logits, axis=1)[:, None])  # the softmax as torch takes it
    p = p / tl.sum(p, axis=1)[:, None]
    top = tl.zeros((ROWS, KP), tl.float32)
    picks = tl.zeros((ROWS, KP), tl.int32)
    for s in tl.static_range(K):
        best = tl.max(p, axis=1)
        pick = tl.min(tl.where(p == best[:, None], cols[None, :], EP), axis=1)
        top = tl.where(slots[None, :] == s, best[:, None], top)
        picks = tl.where(slots[None, :] == s, pick[:, None], picks)
        p = tl.where(cols[None, :] == pick[:, None], -1.0, p)  # probabilities are >= 0: never picked again
    top = tl.where(routed[:, None], top / tl.sum(top, axis=1)[:, None], 0.0)
    picks = tl.where(routed[:, None], picks, -1)  # a padding row goes to no expert
    out = rows[:, None] * K + slots[None, :]
    keep = live[:, None] & (slots < K)[None, :]
    tl.store(weights_ptr + out, top, mask=keep)
    tl.store(experts_ptr + out, picks.to(tl.int64), mask=keep)
    tl.atomic_add(counts_ptr + picks, tl.full((ROWS, KP), 1, tl.int64), mask=keep & routed[:, None])


@torch.library.custom_op(f"{_NAMESPACE}::prefill_route", mutates_args=("counts",))
def prefill_route(logits: torch.Tensor, k: int, counts: torch.Tensor,
                  valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits (T, E) -> (weights (T, k) fp32 summing to 1, expert ids (T, k) int64), as SparseMoE.route;
    adds each pick to counts (E,) int64. With `valid` ((1,) int64 on the device: the prompt's rows in a padded
    bucket) the rows from it on go to no expert: ids -1, weights 0, uncounted, so that grouped_fp8_experts reads
    no expert for them."""
    T, E = logits.shape
    weights = torch.empty((T, k), dtype=torch.float32, device=logits.device)
    experts = torch.empty((T, k), dtype=torch.long, device=logits.device)
    if logits.stride(1) != 1:  # rows may be strided (the router's columns of a wider GEMM), columns not
        logits = logits.contiguous()
    if T:
        rows = counts if valid is None else valid  # without `valid` the kernel never reads it: any pointer
        _route_kernel[(triton.cdiv(T, ROWS),)](logits, weights, experts, counts, rows, T, logits.stride(0), E,
                                                triton.next_power_of_2(E), k, triton.next_power_of_2(k), ROWS,
                                                valid is not None, num_warps=NUM_WARPS)
    return weights, experts


@prefill_route.register_fake
def _(logits: torch.Tensor, k: int, counts: torch.Tensor,
      valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    T = logits.shape[0]
    return logits.new_empty((T, k), dtype=torch.float32), logits.new_empty((T, k), dtype=torch.long)
