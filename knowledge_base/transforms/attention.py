"""Attention transforms (backbone full-attention layers and every tower layer): RoPE from precomputed tables,
and GQA inside SDPA without copying the KV cache per query head.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

LAYERS, ATTENTION = "layers.py", "attention.py"

_ROPE_ANGLES = """\
    half = rotary_dim // 2
    inv_freq = theta ** (-torch.arange(0, half, device=x.device, dtype=torch.float32) * 2 / rotary_dim)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, half)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]  # broadcast over heads
"""
_ROPE_SIGNATURE = "def apply_rope("


def _rope_tables(files: Files, params: Params) -> list[Patch]:
    rows = int(params["table_rows"])
    return [
        replace_once(files, LAYERS, _ROPE_ANGLES, """\
    half = rotary_dim // 2
    cos_table, sin_table = rope_table(rotary_dim, theta, x.device)
    cos, sin = cos_table[positions][:, None, :], sin_table[positions][:, None, :]  # broadcast over heads
"""),
        replace_once(files, LAYERS, _ROPE_SIGNATURE, f'''\
ROPE_TABLE_ROWS = {rows}  # positions are < max_context_rows (16384 for drama3), checked by the engine


@functools.lru_cache(maxsize=None)
def rope_table(rotary_dim: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta^(-2i/rotary_dim), (ROPE_TABLE_ROWS, rotary_dim/2) fp32: computed once
    per geometry with exactly the per-call arithmetic, so lookups equal the direct computation bit for bit."""
    half = rotary_dim // 2
    inv_freq = theta ** (-torch.arange(0, half, device=device, dtype=torch.float32) * 2 / rotary_dim)
    angles = torch.arange(ROPE_TABLE_ROWS, device=device).to(torch.float32)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope('''),
        replace_once(files, LAYERS, "import torch\n", "import functools\n\nimport torch\n"),
    ]


rope_tables = Transform(
    name="rope_tables",
    # the CPU demo's 1.077x was noisy (spread 78%, CI 0.945-1.090): no evidence of a gain, so no prior above 1
    impact={"cpu": 1.0,
            # a guess: a few elementwise kernels per attention call in a ~4,000-kernel eager frame; the graphed
            # frame (cuda_graph_frame) has its own RoPE tables
            "cuda": 1.01},
    summary="look RoPE cos/sin up in tables computed once per geometry instead of recomputing the angles "
            "on every attention call",
    feature="gated_attention",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_rope_tables,
    space={"table_rows": (16384,)},
    lesson="Bit-exact; saves the angle arithmetic of every q/k rotation (backbone, tower and codec).",
)

_MASK_AND_SDPA = """\
        if cache is None:
            keys, values, mask = k, v, None
        else:
            keys, values = cache.append(k, v)
            mask = torch.arange(keys.shape[0], device=x.device)[None, :] <= positions[:, None]  # (T, rows)
        group = g.num_heads // g.num_kv_heads  # query head h reads kv head h // group
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.repeat_interleave(group, dim=1).transpose(0, 1),
            values.repeat_interleave(group, dim=1).transpose(0, 1), attn_mask=mask, is_causal=mask is None,
        ).transpose(0, 1)  # (T, heads, head_dim)
"""


def _gqa_sdpa(files: Files, params: Params) -> list[Patch]:
    return [replace_once(files, ATTENTION, _MASK_AND_SDPA, """\
        causal, mask = True, None
        if cache is not None:
            keys_before = cache.length
            k, v = cache.append(k, v)
            # The cache holds exactly the rows before these: one new row sees them all (no mask), and a
            # fresh cache is plain causal attention; only a multi-row continuation needs an explicit mask.
            causal = T > 1 and keys_before == 0
            if T > 1 and keys_before > 0:
                mask = torch.arange(k.shape[0], device=x.device)[None, :] <= positions[:, None]  # (T, rows)
        # enable_gqa: query head h reads kv head h // group inside SDPA, without repeating the cache.
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              attn_mask=mask, is_causal=causal, enable_gqa=True).transpose(0, 1)
""")]


gqa_sdpa = Transform(
    name="gqa_sdpa",
    impact={"cpu": 1.065,  # measured alone in the CPU demo (docs/benchmarks.md)
            # a guess: two KV copies fewer per attention call of a ~4,000-kernel eager frame; the graphed frame
            # has its own attention, so after cuda_graph_frame only an eager prefill gains
            "cuda": 1.02},
    # no TTFA prior on CUDA: session 20 guessed 1.04 (the compiled prefill's 46 float32 attention GEMMs), but in
    # session 21's full-size stack on an H100 those GEMMs were still there and TTFA moved 1.01x at most
    # (docs/measurements/2026-12-05_h100_s21_fast_check.json)
    summary="let SDPA share KV heads across query groups (enable_gqa) instead of repeat_interleave copies of "
            "the whole cache, and skip the mask when one new row attends to the full cache",
    feature="gated_attention",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_gqa_sdpa,
    lesson="Needs torch >= 2.5 (enable_gqa). The repeat_interleave copies grow with the context, so the gain "
           "grows with sequence length; on drama3-tiny CPU a decode attention call gets several times cheaper.",
)

_CALLS = {  # the reference's SDPA call, and gqa_sdpa's
    """\
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.repeat_interleave(group, dim=1).transpose(0, 1),
            values.repeat_interleave(group, dim=1).transpose(0, 1), attn_mask=mask, is_causal=mask is None,
        ).transpose(0, 1)  # (T, heads, head_dim)
""": """\
        attn = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys.repeat_interleave(group, dim=1).transpose(0, 1)[None],
            values.repeat_interleave(group, dim=1).transpose(0, 1)[None], attn_mask=mask, is_causal=mask is None,
        )[0].transpose(0, 1)  # (T, heads, head_dim)
""",
    """\
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              attn_mask=mask, is_causal=causal, enable_gqa=True).transpose(0, 1)
""": """\
        attn = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                              v.transpose(0, 1)[None], attn_mask=mask, is_causal=causal,
                                              enable_gqa=True)[0].transpose(0, 1)
""",
}
_WHY = """\
        # A batch dim of 1: CUDA's fused kernels (flash, memory-efficient, cuDNN) take only 4-D inputs. With 3-D
        # ones SDPA runs its math kernel, which computes bf16 attention as float32 GEMMs and a separate softmax.
"""


def _fused_sdpa(files: Files, params: Params) -> list[Patch]:
    call = next((c for c in _CALLS if c in files.get(ATTENTION, "")), next(iter(_CALLS)))
    return [replace_once(files, ATTENTION, call, _WHY + _CALLS[call])]


fused_sdpa = Transform(
    name="fused_sdpa",
    # measured on an H100 (session 24, docs/benchmarks.md), together with `renew triton_prefill_moe`: TTFA 21.7 /
    # 28.8 / 30.6 -> 20.0 / 26.7 / 27.8 ms (hello / sentences / voice), of which the renewal alone gave ~1.03x in
    # session 23; the 46 float32 GEMMs became 23 cuDNN flash kernels. Decode does not change (the graphed frame has
    # its own attention kernels). It passed the teacher-forced gate there (max logit error 0.141, top-1 0.975)
    impact={"cuda": 1.0},
    first_audio={"cuda": 1.05},
    summary="give SDPA 4-D inputs (a batch dim of 1) so that CUDA's fused attention kernels serve the prefill's "
            "causal calls, instead of the math kernel's float32 GEMMs that 3-D inputs always get",
    feature="gated_attention",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_fused_sdpa,
    lesson="SDPA picks a fused kernel only for 4-D query, key and value; the engine's attention passed (heads, "
           "rows, dim), so every call ran the math kernel, which also upcasts bf16 to float32 (torch's default "
           "for reduced-precision math attention). gqa_sdpa makes a prefill's call causal with no mask, which "
           "flash attention takes with GQA; without it, the explicit causal mask goes to the memory-efficient "
           "kernel. Moves logits by bf16 rounding of the attention probabilities only.",
)
