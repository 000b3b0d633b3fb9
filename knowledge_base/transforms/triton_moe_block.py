"""triton_moe_block: each backbone layer of the graphed decode frame as its mixer's kernels
(triton_backbone_attention, triton_backbone_deltanet) then its whole MoE block in three kernels: the
post-attention norm with the router | shared-expert GEMV, and triton_moe_fused's two kernels, the down kernel adding
the residual. That drops per layer the norm's and the residual add's launches and cuBLAS's GEMV, and the mixers'
inductor pieces around them. The kernel file lives in templates/triton_moe_block/.
"""
from __future__ import annotations

from .backbone_kernels import STEP, SWITCH
from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

FUSED = "fused_moe.py"
TOWER = "triton_tower.py"  # its GEMV tile helpers (_tiles, _chunks) since session 14
_RESIDUAL = "residual: torch.Tensor | None = None"  # triton_moe_fused's down kernel adds the residual since session 12
_LOOP_HEAD = """\
        cfg, buf = self.config.backbone, self.state.buf
        future = buf.rows[:span] > buf.pos
        x = F.embedding(buf.frame[:1], self.w.embed)
        moe_out = torch.zeros_like(x)
"""

KNOBS = Knobs("moe_block_params.py", "triton_moe_block", {
    "block_n": "projection rows per norm + router|shared GEMV program",
    "block_k": "hidden columns per unrolled load of that GEMV",
    "num_warps": "that GEMV",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    sizes = KNOBS.powers_of_two(params)
    for kernels, by in (("def _attention_kernels(", "triton_backbone_attention"),
                        ("def _deltanet_kernels(", "triton_backbone_deltanet")):
        if kernels not in files.get(STEP, ""):  # the layer loop calls the mixers' kernels directly
            raise NotApplicable(f"triton_moe_block: apply {by} first")
    if _RESIDUAL not in files.get(FUSED, ""):
        raise NotApplicable(f"triton_moe_block: {FUSED} predates the residual add of its down kernel; renew "
                            "triton_moe_fused first")
    if "def _tiles(" not in files.get(TOWER, ""):
        raise NotApplicable(f"triton_moe_block: {TOWER} predates the GEMV tile helpers its kernel imports; renew "
                            "triton_tower first")
    return [
        *template_files(files, "triton_moe_block"),
        KNOBS.patch(sizes),
        replace_once(files, STEP, _LOOP_HEAD, f"""\
        cfg, buf = self.config.backbone, self.state.buf
        x = F.embedding(buf.frame[:1], self.w.embed)
        if x.is_cuda or {SWITCH}:  # triton_moe_block: each layer's mixer kernels, then its MoE block's
            from .moe_block import moe_block

            for lw, cache in zip(self.w.layers, self.state.backbone):
                if isinstance(lw.mixer, AttnWeights):
                    x = _attention_kernels(x, lw, self.backbone_geo, cache, buf.pos, span, self.backbone_rope)
                else:
                    x = _deltanet_kernels(x, lw, cfg, cache)
                x = moe_block(x, lw.post_gain, lw.moe, cfg)
            buf.hidden.copy_(norm(x, self.w.norm_gain, cfg.rms_norm_eps))
            return
        future = buf.rows[:span] > buf.pos
        moe_out = torch.zeros_like(x)
"""),
    ]


triton_moe_block = Transform(
    name="triton_moe_block",
    # measured on the H200 (session 12, scripts/gpu_moe_block_bench.py, docs/measurements/
    # 2026-12-04_h200_s12_moe_block.json): a frame's 40 MoE halves at full size took 24.64 us per layer before and
    # 20.69 with it (default tiles); 0.16 ms of the kept engine's 3.44 ms frame
    impact={"cuda": 1.05},
    summary="run each backbone layer of the graphed frame as its mixer kernels, then its MoE block as three "
            "kernels: post-attention norm + router|shared GEMV in one, triton_moe_fused's two, the down kernel "
            "adding the residual; no norm, add or cuBLAS launch between them",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    # on the H200 (session 12): its kernels equal torch's norm + GEMV and the fused MoE at full MoE dims, the down
    # kernel's add bit for bit, and the kept engine's stack with it passed drama3-tiny's teacher-forced gate
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_moe_block",),
    apply=_apply,
    # fastest first (the bench above): 2/2048/8 warps 20.69 us per layer, 4/1024/4 21.75
    space={"block_n": (2, 4, 1), "block_k": (2048, 1024), "num_warps": (8, 4)},
    requires=("cuda_graph_frame", "triton_moe_fused", "triton_backbone_attention", "triton_backbone_deltanet"),
    lesson="With every mixer and the MoE experts in Triton kernels, the graphed frame still spent ~6 us per "
           "layer between them: an inductor RMSNorm, a cuBLAS GEMV of the 1281 router|shared rows at ~1.2 TB/s, "
           "and an add of the MoE output into the residual stream. The norm is recomputed in every GEMV program "
           "(4 KB of input), and the add moves into the down kernel's epilogue, which has each output row anyway.",
)
