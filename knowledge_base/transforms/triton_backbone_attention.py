"""triton_backbone_attention: the backbone's full-attention layers of the graphed decode frame through
triton_tower's kernels (rotate-half RoPE there): RMSNorm and the q|gate, k, v GEMV in one kernel, the split-KV
attention kernel (q/k norm, RoPE, cache write, merge, sigmoid gate), o_proj with the residual in one more. That
replaces ~30 torch ops per layer, among them an fp32 copy of the layer's whole cached K/V span every frame.
"""
from __future__ import annotations

from .backbone_kernels import STEP, SWITCH, triton_switch
from .base import Files, NotApplicable, Params, Patch, Transform, replace_once

_ADD = "    x = x + moe_out\n"
_CALL = "    x = x + attention_decode(norm(x, lw.input_gain, geo.eps), lw.mixer, geo, cache, pos, future, rope)\n"
_MIXER = "def _attention_mixer("


def _apply(files: Files, params: Params) -> list[Patch]:
    if "triton_tower.py" not in files:  # its kernels are imported from there
        raise NotApplicable("triton_backbone_attention: apply triton_tower first")
    return [
        *triton_switch(files),
        replace_once(files, STEP, _MIXER, '''\
# dynamo must not trace the launch wrappers (buffer allocation, atomic tickets): with COMPILE_STEPS the mixer
# breaks in two compiled pieces around this call (the add before, the post-attention norm after)
@torch.compiler.disable
def _attention_kernels(x: torch.Tensor, lw: LayerWeights, geo: AttentionGeometry, cache: StaticKVCache,
                       pos: torch.Tensor, span: int, rope: RopeTable) -> torch.Tensor:
    """x + attention_decode(norm(x)) by triton_backbone_attention: three kernels."""
    from .triton_tower import attention, norm_gemv, residual_gemv

    qkv = norm_gemv(x, lw.input_gain, lw.mixer.qkv, geo.eps, swiglu=False)
    out = attention(qkv, lw.mixer, geo, cache, pos, span, rope)
    return residual_gemv(out, lw.mixer.o_proj, x, None, cache.tickets[geo.num_kv_heads:])


''' + _MIXER),
        replace_once(files, STEP, _ADD + _CALL, _ADD + '''\
    if x.is_cuda or ''' + SWITCH + ''':
        x = _attention_kernels(x, lw, geo, cache, pos, future.shape[0], rope)
    else:
''' + "    " + _CALL),
    ]


triton_backbone_attention = Transform(
    name="triton_backbone_attention",
    # measured on the H200 side by side in one run (session 7, docs/benchmarks.md): the whole fast stack with
    # triton_tower took 4.840 ms/frame without it and 4.662 with it, 1.038x
    impact={"cuda": 1.04},
    summary="run each backbone full-attention layer of the graphed frame as triton_tower's three kernels: "
            "norm + q|k|v GEMV, split-KV attention with q/k-norm, rotate-half RoPE, cache write and gate, and "
            "o_proj + residual; no fp32 copy of the cached K/V span",
    feature="gated_attention",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame", "triton_tower"),
    lesson="On the H200 the fast stack with triton_tower went from 4.840 to 4.662 ms/frame with it (1.038x, 905 "
           "instead of 1045 kernels per frame) and passed the gate at full size. It reuses triton_tower's "
           "attention kernel, whose tower timing on the H200 was 1.30 vs 2.59 ms for 13 layers. The torch "
           "attention step casts the layer's whole cached K/V span to fp32 each frame; the kernel reads the bf16 "
           "cache once. Its kernels run outside inductor (torch.compiler.disable), so with inductor_decode_steps "
           "the add of the previous MoE output and the post-attention norm stay compiled, in two pieces.",
)
