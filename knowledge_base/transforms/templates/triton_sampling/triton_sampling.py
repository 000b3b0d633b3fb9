"""decode_sampling's draws as one Triton kernel each (one program per draw, the row in registers): temperature,
top-k, the top-p nucleus, softmax, the exponential race and the argmax, with NoiseTable's noise hashed in the
kernel from (seed, position, index), so no noise tensor is written and no host sync happens. draw_main's two
races and its repeat check are one kernel; its RAS race runs only when the first draw repeats a recent token.

Without a sort: the k-th largest logit and the nucleus's probability cut-off are found by bisection over the
ordered bit patterns of the float32 values (32 and 31 steps of one block reduction each). A value's standing
then depends on the values only, never on a sort order: ties at the k-th logit all stay in (as in
sampling.filter_logits), and tokens of equal probability at the nucleus's edge are kept or dropped together
(torch's sort order decides there). Argmaxes take the first index of the maximum, as torch.argmax does.
Softmax sums and the nucleus's mass are reduced in another order than torch's, so a draw can differ from
decode_sampling.race only where two scores or the mass and top_p agree to float32 rounding.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from reference_runtime.api import SamplingParams

from .triton_sampling_params import CODE_WARPS, MAIN_WARPS


@triton.jit
def _mix32(x):
    """decode_sampling._mix32 on uint32: the products wrap modulo 2^32 as the masked int64 ones do."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _noise(slot_ptr, offs, PRECISE_LOG: tl.constexpr):
    """NoiseTable.draw's Exp(1) noise at the slot's indices offs: the same hash and float32 steps. The log is
    libdevice's (CUDA's logf, what torch uses) on the GPU; the interpreter has only NumPy's (a ulp or two apart)."""
    seed = tl.load(slot_ptr)
    key = _mix32((seed ^ (seed >> 32)).to(tl.uint32) * 0x9E3779B1 + tl.load(slot_ptr + 1).to(tl.uint32))
    bits = _mix32(_mix32((tl.load(slot_ptr + 2) + offs).to(tl.uint32) ^ key) + key)
    uniform = ((bits >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07  # 2^-23
    if PRECISE_LOG:
        noise = -libdevice.log(uniform)
    else:
        noise = -tl.log(uniform)
    return noise


@triton.jit
def _first_max(x, offs, BLOCK: tl.constexpr):
    """torch.argmax: the first index of the largest entry."""
    return tl.min(tl.where(x == tl.max(x, 0), offs, BLOCK), 0)


@triton.jit
def _kth_largest(x, k):
    """The k-th largest entry's order key: the largest t with at least k keys >= t. Keys are the float32 bits
    made signed-monotone (-0.0 added to +0.0 first, so equal floats get equal keys)."""
    bits = (x + 0.0).to(tl.int32, bitcast=True)
    keys = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    lo = tl.min(keys, 0).to(tl.int64)
    hi = tl.max(keys, 0).to(tl.int64)
    for _ in range(32):  # the keys span < 2^32
        mid = hi - (hi - lo) // 2
        enough = tl.sum((keys >= mid).to(tl.int32), 0) >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid - 1)
    return keys >= lo


@triton.jit
def _nucleus(p, offs, top_p, KEEP_CROSSING: tl.constexpr, BLOCK: tl.constexpr):
    """Which probabilities stay in the top-p nucleus. keep_crossing: those whose strictly likelier entries hold
    less than top_p; otherwise those whose at-least-as-likely entries hold at most top_p, and the most likely.
    Either set is every p at or above a cut-off, the least bit pattern t passing the test (p >= 0, so the bits
    order as the floats)."""
    bits = p.to(tl.int32, bitcast=True)
    lo = tl.min(bits, 0).to(tl.int64)  # a cut-off below the least p keeps what this one keeps: everything
    hi = tl.max(bits, 0).to(tl.int64)  # passes: nothing lies above it (at or above it, +1 without keep_crossing)
    if not KEEP_CROSSING:
        hi += 1
    for _ in range(31):  # p <= 1.0, whose bits are < 2^30
        mid = lo + (hi - lo) // 2
        if KEEP_CROSSING:
            passes = tl.sum(tl.where(bits > mid, p, 0.0), 0) < top_p
        else:
            passes = tl.sum(tl.where(bits >= mid, p, 0.0), 0) <= top_p
        hi = tl.where(passes, mid, hi)
        lo = tl.where(passes, lo, mid + 1)
    kept = bits >= lo
    if not KEEP_CROSSING:
        kept |= offs == _first_max(p, offs, BLOCK)
    return kept


@triton.jit
def _race(x, offs, slot_ptr, temperature, top_p, top_k, GREEDY: tl.constexpr, HAS_TOP_K: tl.constexpr,
          HAS_TOP_P: tl.constexpr, KEEP_CROSSING: tl.constexpr, PRECISE_LOG: tl.constexpr, BLOCK: tl.constexpr):
    """decode_sampling.race over a row held as x (-inf past its width): the drawn index (int32)."""
    if GREEDY:
        index = _first_max(x, offs, BLOCK)
    else:
        # The float arguments come in as fp64 when torch.compile launches this kernel (inductor_decode_steps):
        # cast them, or x turns fp64 and the float32 bit tricks below do not compile.
        x = x / tl.cast(temperature, tl.float32)
        top_p = tl.cast(top_p, tl.float32)
        if HAS_TOP_K:
            x = tl.where(_kth_largest(x, top_k), x, float("-inf"))
        e = tl.exp(x - tl.max(x, 0))
        p = e / tl.sum(e, 0)
        if HAS_TOP_P:
            e = tl.where(_nucleus(p, offs, top_p, KEEP_CROSSING, BLOCK), e, 0.0)
            p = e / tl.sum(e, 0)
        index = _first_max(p / _noise(slot_ptr, offs, PRECISE_LOG), offs, BLOCK)
    return index


@triton.jit
def _draw_main_kernel(logits_ptr, recent_ptr, main_noise_ptr, ras_noise_ptr, out_ptr, width, temperature, top_p, top_k,
                      ras_temperature, ras_top_p, ras_top_k, GREEDY: tl.constexpr, HAS_TOP_K: tl.constexpr,
                      HAS_TOP_P: tl.constexpr, RAS_GREEDY: tl.constexpr, RAS_HAS_TOP_K: tl.constexpr,
                      RAS_HAS_TOP_P: tl.constexpr, WINDOW: tl.constexpr, WINDOW_BLOCK: tl.constexpr,
                      PRECISE_LOG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + offs, mask=offs < width, other=float("-inf"))
    index = _race(x, offs, main_noise_ptr, temperature, top_p, top_k, GREEDY, HAS_TOP_K, HAS_TOP_P, True,
                  PRECISE_LOG, BLOCK)
    if WINDOW > 0:
        slots = tl.arange(0, WINDOW_BLOCK)
        recent = tl.load(recent_ptr + slots, mask=slots < WINDOW, other=-1)
        if (index != 0) & (tl.max((recent == index).to(tl.int32), 0) > 0):
            index = _race(x, offs, ras_noise_ptr, ras_temperature, ras_top_p, ras_top_k, RAS_GREEDY,
                          RAS_HAS_TOP_K, RAS_HAS_TOP_P, True, PRECISE_LOG, BLOCK)
    tl.store(out_ptr, index.to(tl.int64))


@triton.jit
def _draw_code_kernel(logits_ptr, noise_ptr, out_ptr, valid_size, temperature, top_p, top_k, GREEDY: tl.constexpr,
                      HAS_TOP_K: tl.constexpr, HAS_TOP_P: tl.constexpr, PRECISE_LOG: tl.constexpr,
                      BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + offs, mask=offs < valid_size, other=float("-inf"))
    index = _race(x, offs, noise_ptr, temperature, top_p, top_k, GREEDY, HAS_TOP_K, HAS_TOP_P, False, PRECISE_LOG,
                  BLOCK)
    tl.store(out_ptr, index.to(tl.int64))


def _race_args(temperature: float, top_p: float, top_k: int, width: int) -> tuple[tuple, tuple]:
    """(runtime args, constexpr flags) of one race over `width` candidate logits: a top-k of at least the
    width keeps everything, and greedy draws ignore top-p."""
    return (temperature, top_p, top_k), (temperature == 0, 0 < top_k < width, top_p < 1.0)


def triton_draw_main(logits: torch.Tensor, params: SamplingParams, recent: torch.Tensor, noise: torch.Tensor,
                     main: int, ras: int) -> torch.Tensor:
    """decode_sampling.draw_main: (1 + codebook_size,) float32 logits -> 0-d int64 index. `noise` holds
    (seed, position, first index) per slot; `main` and `ras` are the two races' slots."""
    width = logits.shape[-1]
    first, first_flags = _race_args(params.temperature, params.top_p, params.top_k, width)
    ras_args, ras_flags = _race_args(params.ras_temperature, params.ras_top_p, params.ras_top_k, width)
    out = torch.empty(1, dtype=torch.int64, device=logits.device)
    _draw_main_kernel[(1,)](logits.contiguous(), recent, noise[main], noise[ras], out, width, *first, *ras_args,
                            *first_flags, *ras_flags, recent.numel(), triton.next_power_of_2(max(1, recent.numel())),
                            logits.is_cuda, triton.next_power_of_2(width), num_warps=MAIN_WARPS)
    return out[0]


def triton_draw_code(logits: torch.Tensor, params: SamplingParams, valid_size: int,
                     noise: torch.Tensor) -> torch.Tensor:
    """decode_sampling.draw_code: (head_size,) float32 logits -> 0-d code in [0, valid_size). Only the valid
    entries are read: the torch draw gives the rest zero probability."""
    top_k = min(params.code_top_k, valid_size) if params.code_top_k > 0 else valid_size
    args, flags = _race_args(params.code_temperature, params.code_top_p, top_k, valid_size)
    out = torch.empty(1, dtype=torch.int64, device=logits.device)
    _draw_code_kernel[(1,)](logits.contiguous(), noise, out, valid_size, *args, *flags, logits.is_cuda,
                            triton.next_power_of_2(valid_size), num_warps=CODE_WARPS)
    return out[0]
