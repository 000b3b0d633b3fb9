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
    # an estimate, not measured: the kept engine's frame spends ~1.3 ms in copies, and each of the 10 attention
    # layers casts its whole cached K/V span to fp32; the tower's 13 layers went from 2.59 to 1.30 ms with the
    # same kernels, so ~0.5 ms of an ~11.8 ms frame
    impact={"cuda": 1.04},
    summary="run each backbone full-attention layer of the graphed frame as triton_tower's three kernels: "
            "norm + q|k|v GEMV, split-KV attention with q/k-norm, rotate-half RoPE, cache write and gate, and "
            "o_proj + residual; no fp32 copy of the cached K/V span",
    feature="gated_attention",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame", "triton_tower"),
    lesson="Not yet run on a GPU: it matches attention_decode under the Triton interpreter (both RoPE pairings) "
           "and the engine's teacher-forced logits match the reference on drama3-tiny. It reuses triton_tower's "
           "attention kernel, whose tower timing on the H200 was 1.30 vs 2.59 ms for 13 layers. The torch "
           "attention step casts the layer's whole cached K/V span to fp32 each frame; the kernel reads the bf16 "
           "cache once. Its kernels run outside inductor (torch.compiler.disable), so with inductor_decode_steps "
           "the add of the previous MoE output and the post-attention norm stay compiled, in two pieces.",
)
