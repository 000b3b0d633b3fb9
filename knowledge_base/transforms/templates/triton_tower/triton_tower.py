"""One codebook-MTP tower layer of the graphed decode frame (decode_tower.tower_layer_decode for one row) as six
Triton kernels instead of ~55 torch kernels, because the captured frame is bound by its kernel count:
(1) enter: every program recomputes the RMS of e and of h (2 x hidden values: cheaper than a launch), then its
    rows of eh_proj on enorm(e) | hnorm(h);
(2) qkv: input_layernorm the same way, then its rows of q|gate, k or v (three matrices or one fused);
(3) attention: per (kv head, split of the rows 0..pos): q/k RMSNorm and interleaved partial RoPE of the group's
    heads, the new key/value written to the cache (and taken from registers at row pos, so no program waits
    for that write), an online softmax over the split's rows; the last program of each kv head to finish (an
    atomic ticket) merges the splits and applies the sigmoid output gate;
(4) o_proj rows plus the residual;
(5) post_attention_layernorm in the prologue, gate and up rows, silu(gate) * up;
(6) down rows plus the residual; the last program to finish applies final_norm to the whole row.
Every kernel reads `pos` on the device and takes only shapes fixed by the span bucket, so one captured graph
replays at every position of its bucket. Sums in fp32; values are rounded to the activation dtype wherever the
torch step rounds them, except the softmax weights, which meet the values in their dtype (as the bf16 SDPA
kernels of the eager reference do) so the products run on tensor cores.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .attention import AttentionGeometry
from .decode_ops import RopeTable
from .decode_weights import AttnWeights, Projection, TowerLayerWeights
from .static_state import StaticKVCache
from .triton_tower_params import (ATTN_ROWS, BLOCK_K, BLOCK_N, GEMV_WARPS, NUM_WARPS, RESIDUAL_BLOCK_K,
                                  RESIDUAL_BLOCK_N, RESIDUAL_WARPS, SPLIT_ROWS)

MAX_SPLITS = 32  # one program merges a kv head's splits: with more, that serial tail outgrows the split work


@triton.jit
def _chunks(ptr, K: tl.constexpr, BK: tl.constexpr, CACHE: tl.constexpr):
    """The K values at ptr as a tuple of K // BK chunks, loaded at once (see _tiles)."""
    chunks = ()
    for c in tl.static_range(K // BK):
        chunks = chunks + (tl.load(ptr + c * BK + tl.arange(0, BK), cache_modifier=CACHE),)
    return chunks


@triton.jit
def _tiles(w_ptr, rows, used, K: tl.constexpr, BK: tl.constexpr, STRIDE: tl.constexpr):
    """Rows `rows`, columns 0..K of the row-major (., STRIDE) matrix at w_ptr as a tuple of K // BK (rows, BK)
    tiles; with a mask `used` over the rows (else None), unused rows read as zeros. A kernel that loads every
    tile before its first block reduction saves the DRAM round trip per chunk that the reduction's barrier costs
    tiles loaded chunk by chunk (in Triton 3.6's PTX). On the H200 (session 14) that paid where a launch has a few
    hundred programs (enter, the MoE block's projection and down kernels, the DeltaNet output), and cost the
    GEMVs of thousands of programs (norm_gemv, residual_gemv) more in resident programs than it saved."""
    tiles = ()
    for c in tl.static_range(K // BK):
        offs = w_ptr + rows[:, None] * STRIDE + (c * BK + tl.arange(0, BK))[None, :]
        if used is None:
            tiles = tiles + (tl.load(offs),)
        else:
            tiles = tiles + (tl.load(offs, mask=used[:, None], other=0.0),)
    return tiles


@triton.jit
def _rstd_of(xs, K: tl.constexpr, BK: tl.constexpr, eps):
    """1 / RMS of the K values in the chunks xs (_chunks), in fp32."""
    squares = tl.zeros((BK,), tl.float32)
    for c in tl.static_range(K // BK):
        x = xs[c].to(tl.float32)
        squares += x * x
    return tl.rsqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def _rstd(x_ptr, K: tl.constexpr, BK: tl.constexpr, eps, CACHE: tl.constexpr):
    """1 / RMS of the K values at x_ptr, in fp32."""
    return _rstd_of(_chunks(x_ptr, K, BK, CACHE), K, BK, eps)


@triton.jit
def _norm_chunk(x, gain, rstd):
    """A chunk x of the zero-centred RMSNorm (gain = 1 + w, fp32), rounded to x's dtype as norm() does, in fp32."""
    return (x.to(tl.float32) * rstd * gain).to(x.dtype).to(tl.float32)


@triton.jit
def _normed(x_ptr, gain_ptr, cols, rstd):
    """Columns `cols` of _norm_chunk's norm of x."""
    return _norm_chunk(tl.load(x_ptr + cols), tl.load(gain_ptr + cols), rstd)


@triton.jit
def _tile_dot(w, x):
    """A (rows, BK) weight tile times the BK values x, fp32."""
    return tl.sum(w.to(tl.float32) * x[None, :], axis=1)


@triton.jit
def _rows_dot(w_ptr, rows, cols, x, K: tl.constexpr):
    """w[rows, cols] @ x[cols] of a row-major (., K) matrix, fp32."""
    return _tile_dot(tl.load(w_ptr + rows[:, None] * K + cols[None, :]), x)


@triton.jit
def _last(ticket_ptr, programs):
    """Whether this program is the last of `programs` to arrive; that one resets the ticket for the next launch
    (graph replays find it at 0). The barrier puts every thread's stores before the releasing atomic."""
    tl.debug_barrier()
    last = tl.atomic_add(ticket_ptr, 1, sem="acq_rel", scope="gpu") == programs - 1
    tl.store(ticket_ptr, 0, mask=last)
    return last


@triton.jit
def _enter_kernel(e_ptr, h_ptr, enorm_ptr, hnorm_ptr, w_ptr, x_ptr, eps, H: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    w_e, w_h = _tiles(w_ptr, rows, None, H, BK, 2 * H), _tiles(w_ptr + H, rows, None, H, BK, 2 * H)
    es, hs = _chunks(e_ptr, H, BK, ""), _chunks(h_ptr, H, BK, "")
    e_gains, h_gains = _chunks(enorm_ptr, H, BK, ""), _chunks(hnorm_ptr, H, BK, "")
    e_rstd, h_rstd = _rstd_of(es, H, BK, eps), _rstd_of(hs, H, BK, eps)
    acc = tl.zeros((BN,), tl.float32)
    for c in tl.static_range(H // BK):
        acc += _tile_dot(w_e[c], _norm_chunk(es[c], e_gains[c], e_rstd))
        acc += _tile_dot(w_h[c], _norm_chunk(hs[c], h_gains[c], h_rstd))
    tl.store(x_ptr + rows, acc.to(x_ptr.dtype.element_ty))


@triton.jit
def _norm_gemv_kernel(x_ptr, gain_ptr, w0_ptr, w1_ptr, w2_ptr, out_ptr, eps, K: tl.constexpr, N0: tl.constexpr,
                      N1: tl.constexpr, SWIGLU: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """RMSNorm(x) times the rows of w0 (N0), w1 (N1) and w2 stacked; with SWIGLU, silu(w0 x) * (w1 x)."""
    first = tl.program_id(0) * BN
    rows = first + tl.arange(0, BN)
    if SWIGLU:
        w_ptr = w0_ptr
    else:  # a tile never straddles two matrices; offset each base so that the stacked row index addresses it
        w_ptr = tl.where(first < N0, w0_ptr, tl.where(first < N0 + N1, w1_ptr - N0 * K, w2_ptr - (N0 + N1) * K))
    rstd = _rstd(x_ptr, K, BK, eps, "")
    acc = tl.zeros((BN,), tl.float32)
    up = tl.zeros((BN,), tl.float32)
    for c in tl.static_range(K // BK):
        cols = c * BK + tl.arange(0, BK)
        x = _normed(x_ptr, gain_ptr, cols, rstd)
        acc += _rows_dot(w_ptr, rows, cols, x, K)
        if SWIGLU:
            up += _rows_dot(w1_ptr, rows, cols, x, K)
    dt = out_ptr.dtype.element_ty
    if SWIGLU:  # rounded where F.silu(gate) * up rounds: the GEMV outputs, silu, the product
        gate = acc.to(dt).to(tl.float32)
        acc = (gate / (1.0 + tl.exp(-gate))).to(dt).to(tl.float32) * up.to(dt).to(tl.float32)
    tl.store(out_ptr + rows, acc.to(dt))


@triton.jit
def _residual_gemv_kernel(a_ptr, w_ptr, res_ptr, y_ptr, gain_ptr, out_ptr, ticket_ptr, eps, K: tl.constexpr,
                          N: tl.constexpr, FINAL_NORM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          NK: tl.constexpr):
    """y = res + w @ a; with FINAL_NORM the last program also writes out = RMSNorm(y) (gain_ptr). The (BN, BK)
    products accumulate elementwise and are reduced once, after the last chunk: a reduction per chunk, as the
    norm GEMVs do, ran these wide-K shapes at half the bandwidth on the H200 (scripts/gpu_gemv_bench.py)."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros((BN, BK), tl.float32)
    for c in tl.static_range(K // BK):
        cols = c * BK + tl.arange(0, BK)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :]).to(tl.float32)
        acc += w * tl.load(a_ptr + cols).to(tl.float32)[None, :]
    dt = y_ptr.dtype.element_ty
    tl.store(y_ptr + rows, (tl.load(res_ptr + rows).to(tl.float32) + tl.sum(acc, axis=1).to(dt).to(tl.float32)).to(dt))
    if FINAL_NORM:
        if _last(ticket_ptr, tl.num_programs(0)):  # .cg: the other programs' rows, from L2
            rstd = _rstd(y_ptr, N, NK, eps, ".cg")
            for c in tl.static_range(N // NK):
                out_cols = c * NK + tl.arange(0, NK)
                y = tl.load(y_ptr + out_cols, cache_modifier=".cg").to(tl.float32)
                tl.store(out_ptr + out_cols, (y * rstd * tl.load(gain_ptr + out_cols)).to(dt))


@triton.jit
def _norm_rope(x_ptr, offs, d, used, gain_ptr, cos_ptr, sin_ptr, eps, HD: tl.constexpr, ROT: tl.constexpr,
               INTERLEAVED: tl.constexpr):
    """Heads (rows) at x_ptr + offs: zero-centred RMSNorm, then RoPE of the first ROT dims, each rounded to x's
    dtype as the torch step rounds. The rotation pairs dims (2i, 2i + 1) when INTERLEAVED (the tower), else
    (i, i + ROT/2) (rotate-half: the backbone). Dim d's partner is loaded a second time rather than shuffled across
    lanes; beyond ROT it is some other dim, multiplied by sin = 0."""
    if INTERLEAVED:
        mate = d ^ 1
        freq = d // 2
        leads = d % 2 == 0
    else:
        mate = d ^ (ROT // 2)
        freq = d % (ROT // 2)
        leads = d % ROT < ROT // 2
    dt = x_ptr.dtype.element_ty
    x = tl.load(x_ptr + offs[:, None] + d[None, :], mask=used[:, None], other=0.0).to(tl.float32)
    partner = tl.load(x_ptr + offs[:, None] + mate[None, :], mask=used[:, None], other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / HD + eps)[:, None]
    x = (x * rstd * tl.load(gain_ptr + d)[None, :]).to(dt).to(tl.float32)
    partner = (partner * rstd * tl.load(gain_ptr + mate)[None, :]).to(dt).to(tl.float32)
    rotary = d < ROT
    cos = tl.load(cos_ptr + freq, mask=rotary, other=1.0)[None, :]
    sin = tl.load(sin_ptr + freq, mask=rotary, other=0.0)[None, :]
    sign = tl.where(leads, -1.0, 1.0)[None, :]  # (a, b) -> (a cos - b sin, b cos + a sin)
    return (x * cos + sign * partner * sin).to(dt)


@triton.jit
def _attention_kernel(qkv_ptr, q_gain_ptr, k_gain_ptr, cos_ptr, sin_ptr, pos_ptr, keys_ptr, values_ptr, part_ptr,
                      stats_ptr, ticket_ptr, out_ptr, eps, scale, NH: tl.constexpr, NKV: tl.constexpr,
                      HD: tl.constexpr, ROT: tl.constexpr, GP: tl.constexpr, S: tl.constexpr, SP: tl.constexpr,
                      BR: tl.constexpr, TILES: tl.constexpr, PRECISION: tl.constexpr, INTERLEAVED: tl.constexpr):
    g = tl.program_id(0)
    s = tl.program_id(1)
    G: tl.constexpr = NH // NKV  # query heads g * G .. g * G + G - 1 read kv head g; padded to GP for tl.dot
    pos = tl.load(pos_ptr)
    d = tl.arange(0, HD)
    heads = tl.arange(0, GP)
    used = heads < G
    cos_row = cos_ptr + pos * (ROT // 2)
    sin_row = sin_ptr + pos * (ROT // 2)
    q = _norm_rope(qkv_ptr, (g * G + heads) * 2 * HD, d, used, q_gain_ptr, cos_row, sin_row, eps, HD, ROT,
                   INTERLEAVED)
    one = tl.arange(0, 1)
    k = _norm_rope(qkv_ptr, NH * 2 * HD + g * HD + one, d, one == 0, k_gain_ptr, cos_row, sin_row, eps, HD, ROT,
                   INTERLEAVED)
    v = tl.load(qkv_ptr + NH * 2 * HD + (NKV + g) * HD + one[:, None] + d[None, :])
    # rows 0..pos split evenly (in BR-row tiles) over the S programs of this kv head
    chunk = tl.cdiv(tl.cdiv(pos + 1, S), BR) * BR
    lo = s * chunk
    hi = tl.minimum(lo + chunk, pos + 1)
    row = (pos * NKV + g) * HD + one[:, None] + d[None, :]
    tl.store(keys_ptr + row, k, mask=(lo <= pos) & (pos < hi))
    tl.store(values_ptr + row, v, mask=(lo <= pos) & (pos < hi))
    m = tl.full((GP,), float("-inf"), tl.float32)
    denom = tl.zeros((GP,), tl.float32)
    acc = tl.zeros((GP, HD), tl.float32)
    for t in range(TILES):
        start = lo + t * BR
        if start < hi:
            r = start + tl.arange(0, BR)
            valid = r < hi
            offs = (r * NKV + g)[:, None] * HD + d[None, :]
            new = (r == pos)[:, None]
            kt = tl.where(new, k, tl.load(keys_ptr + offs, mask=valid[:, None], other=0.0))
            vt = tl.where(new, v, tl.load(values_ptr + offs, mask=valid[:, None], other=0.0))
            # scale after the product: a power of two for these head dims, so the same as scaling q first
            scores = tl.dot(q, tl.trans(kt), input_precision=PRECISION) * scale
            scores = tl.where(valid[None, :], scores, float("-inf"))
            top = tl.maximum(m, tl.max(scores, axis=1))
            p = tl.exp(scores - top[:, None])
            alpha = tl.exp(m - top)
            denom = denom * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PRECISION)
            m = top
    split = g * S + s
    tl.store(part_ptr + (split * GP + heads[:, None]) * HD + d[None, :], acc)
    tl.store(stats_ptr + split * 2 * GP + heads, m)
    tl.store(stats_ptr + split * 2 * GP + GP + heads, denom)
    if _last(ticket_ptr + g, S):  # merge the splits (.cg: the other programs' partials, from L2)
        splits = tl.arange(0, SP)
        stat = stats_ptr + ((g * S + splits) * 2 * GP)[:, None] + heads[None, :]
        there = (splits < S)[:, None]
        maxes = tl.load(stat, mask=there, other=float("-inf"), cache_modifier=".cg")
        top = tl.max(maxes, axis=0)  # finite: split 0 always holds row 0
        total = tl.sum(tl.exp(maxes - top[None, :]) * tl.load(stat + GP, mask=there, other=0.0, cache_modifier=".cg"),
                       axis=0)
        out = tl.zeros((GP, HD), tl.float32)
        for t in range(S):
            weight = tl.exp(tl.load(stats_ptr + (g * S + t) * 2 * GP + heads, cache_modifier=".cg") - top)
            out += weight[:, None] * tl.load(part_ptr + ((g * S + t) * GP + heads[:, None]) * HD + d[None, :],
                                             cache_modifier=".cg")
        gate = tl.load(qkv_ptr + ((g * G + heads) * 2 * HD + HD)[:, None] + d[None, :], mask=used[:, None],
                       other=0.0).to(tl.float32)
        out = out / total[:, None] * (1.0 / (1.0 + tl.exp(-gate)))
        tl.store(out_ptr + ((g * G + heads) * HD)[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=used[:, None])


def _block(size: int, limit: int) -> int:
    """min(limit, size), which must divide `size` and be a power of two (a tl.arange length)."""
    block = min(limit, size)
    if size % block or block & (block - 1):
        raise ValueError(f"triton_tower: {size} rows or columns do not split into power-of-two blocks of <= {limit}")
    return block


def _check(*tensors: torch.Tensor) -> None:
    if not all(t.is_contiguous() for t in tensors):
        raise ValueError("triton_tower's kernels read activations, weights and caches as contiguous arrays")


def _matrices(proj: Projection) -> list[torch.Tensor]:
    """The projection's matrices: row views of the fused one when it is fused (no copy)."""
    return list(proj.mats[0].split(proj.sizes)) if len(proj.mats) == 1 else list(proj.mats)


def enter(h: torch.Tensor, e: torch.Tensor, w: TowerLayerWeights, eps: float) -> torch.Tensor:
    """eh_proj @ (enorm(e) | hnorm(h)): (1, hidden) in h's dtype."""
    _check(h, e, w.eh_proj)
    hidden, x = h.shape[-1], torch.empty_like(h)
    bn = _block(hidden, BLOCK_N)
    _enter_kernel[(hidden // bn,)](e, h, w.enorm, w.hnorm, w.eh_proj, x, eps, hidden, bn, _block(hidden, BLOCK_K),
                                   num_warps=NUM_WARPS)
    return x


def norm_gemv(x: torch.Tensor, gain: torch.Tensor, proj: Projection, eps: float, swiglu: bool) -> torch.Tensor:
    """The projection's outputs on RMSNorm(x) concatenated (rows,), or silu(gate) * up (inter,) with swiglu."""
    mats = _matrices(proj)
    _check(x, *mats)
    hidden = x.shape[-1]
    rows = mats[0].shape[0] if swiglu else sum(m.shape[0] for m in mats)
    bn = min(_block(m.shape[0], BLOCK_N) for m in mats)
    out = torch.empty(rows, dtype=x.dtype, device=x.device)
    w0, w1, w2 = (mats * 2)[:3]  # with swiglu: gate, up and an unread third
    _norm_gemv_kernel[(rows // bn,)](x, gain, w0, w1, w2, out, eps, hidden, w0.shape[0], 0 if swiglu else w1.shape[0],
                                     swiglu, bn, _block(hidden, BLOCK_K), num_warps=GEMV_WARPS)
    return out


def attention_splits(span: int) -> int:
    """Programs per kv head for a span bucket (static per captured graph; each takes an even share of 0..pos)."""
    return min(MAX_SPLITS, triton.cdiv(span, SPLIT_ROWS))


def attention(qkv: torch.Tensor, w: AttnWeights, geo: AttentionGeometry, cache: StaticKVCache, pos: torch.Tensor,
              span: int, rope: RopeTable) -> torch.Tensor:
    """decode_attention.attention_decode before o_proj, from the q|gate, k, v GEMV outputs (rows,): writes the
    row's key and value at pos and returns sigmoid(gate) * attention (heads * head_dim,) in qkv's dtype."""
    nh, nkv, hd = geo.num_heads, geo.num_kv_heads, geo.head_dim
    _check(qkv, cache.keys, cache.values, rope.cos, rope.sin)
    rot = geo.rotary_dim
    if hd & (hd - 1) or hd < 16 or rot < 2 or rot & (rot - 1):
        raise ValueError(f"triton_tower's attention takes power-of-two head dims >= 16 and rotary dims >= 2, got "
                         f"head_dim {hd}, rotary_dim {rot}")
    if rope.cos.shape[1] != rot // 2:  # the kernel steps through the table by rot // 2 per row
        raise ValueError(f"the RoPE table has {rope.cos.shape[1]} frequencies, the geometry {rot // 2}")
    splits, group = attention_splits(span), max(16, triton.next_power_of_2(nh // nkv))  # tl.dot needs 16 rows
    part = torch.empty((nkv, splits, group, hd), dtype=torch.float32, device=qkv.device)
    stats = torch.empty((nkv, splits, 2, group), dtype=torch.float32, device=qkv.device)
    out = torch.empty(nh * hd, dtype=qkv.dtype, device=qkv.device)
    _attention_kernel[(nkv, splits)](
        qkv, w.q_gain, w.k_gain, rope.cos, rope.sin, pos, cache.keys, cache.values, part, stats, cache.tickets, out,
        geo.eps, hd ** -0.5, nh, nkv, hd, geo.rotary_dim, group, splits, triton.next_power_of_2(splits), ATTN_ROWS,
        triton.cdiv(triton.cdiv(span, splits), ATTN_ROWS),
        "ieee" if qkv.dtype == torch.float32 else None, geo.interleaved_rope,  # fp32 as torch's, not TF32
        num_warps=NUM_WARPS)
    return out


def residual_gemv(a: torch.Tensor, mat: torch.Tensor, res: torch.Tensor, final: tuple[torch.Tensor, float] | None,
                  ticket: torch.Tensor) -> torch.Tensor:
    """res + mat @ a (1, hidden) in res's dtype; with final = (gain, eps), RMSNorm of that sum."""
    _check(a, mat, res)
    hidden, k = mat.shape
    bn = _block(hidden, RESIDUAL_BLOCK_N)
    y = torch.empty_like(res)
    out = torch.empty_like(res) if final else y
    gain, eps = final or (res, 0.0)  # unread without the final norm
    _residual_gemv_kernel[(hidden // bn,)](a, mat, res, y, gain, out, ticket, eps, k, hidden, final is not None, bn,
                                           _block(k, RESIDUAL_BLOCK_K), _block(hidden, BLOCK_K),
                                           num_warps=RESIDUAL_WARPS)
    return out


def triton_tower_layer(h: torch.Tensor, e: torch.Tensor, w: TowerLayerWeights, geo: AttentionGeometry,
                       cache: StaticKVCache, pos: torch.Tensor, future: torch.Tensor, rope: RopeTable) -> torch.Tensor:
    """decode_tower.tower_layer_decode: h, e (1, hidden) at row pos (1,) over a span of future.shape[0] rows."""
    x = enter(h, e, w, geo.eps)
    qkv = norm_gemv(x, w.input_gain, w.attn.qkv, geo.eps, swiglu=False)
    attn = attention(qkv, w.attn, geo, cache, pos, future.shape[0], rope)
    ticket = cache.tickets[geo.num_kv_heads:]  # after the attention kernel's
    x = residual_gemv(attn, w.attn.o_proj, x, None, ticket)
    act = norm_gemv(x, w.post_gain, w.gate_up, geo.eps, swiglu=True)
    return residual_gemv(act, w.down, x, (w.final_gain, geo.eps), ticket)
