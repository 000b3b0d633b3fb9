"""triton_backbone_deltanet: the backbone's Gated DeltaNet layers of the graphed decode frame as three Triton
kernels each: RMSNorm and the qkvz|ba GEMV (triton_tower's norm_gemv), one step kernel (causal conv + SiLU, q/k
L2 norms, beta and decay, the delta rule on the fp32 state), and the gated RMSNorm with out_proj and the residual
(which also advances the conv window). That replaces ~40 torch ops per layer over 30 layers. The kernel file
lives in templates/triton_backbone_deltanet/.
"""
from __future__ import annotations

from .backbone_kernels import STEP, SWITCH, triton_switch
from .base import Files, NotApplicable, Params, Patch, Transform, knobs_in, replace_once, template_files

_ADD = "    x = x + moe_out\n"
_CALL = "    x = x + deltanet_decode(norm(x, lw.input_gain, cfg.rms_norm_eps), lw.mixer, cfg, state)\n"
_MIXER = "def _deltanet_mixer("


def _apply(files: Files, params: Params) -> list[Patch]:
    if "triton_tower.py" not in files:  # norm_gemv and the GEMV helpers are imported from there
        raise NotApplicable("triton_backbone_deltanet: apply triton_tower first")
    block_v, warps = int(params["block_v"]), int(params["num_warps"])
    if any(n < 1 or n & (n - 1) for n in (block_v, warps)):
        raise ValueError(f"triton_backbone_deltanet: block_v ({block_v}) and num_warps ({warps}) must be powers of "
                         "two")
    return [
        *template_files(files, "triton_backbone_deltanet"),
        Patch("triton_deltanet_step_params.py", "", f'''\
"""Parameters the triton_backbone_deltanet transform was applied with."""
BLOCK_V = {block_v}  # value columns per step program (capped to dv): smaller = more programs, fewer registers
NUM_WARPS = {warps}  # of the step kernel; the GEMVs take triton_tower's
'''),
        *triton_switch(files),
        replace_once(files, STEP, _MIXER, '''\
# dynamo must not trace the launch wrapper: with COMPILE_STEPS the mixer breaks in two compiled pieces around it
@torch.compiler.disable
def _deltanet_kernels(x: torch.Tensor, lw: LayerWeights, cfg: BackboneConfig, state: DeltaNetState) -> torch.Tensor:
    """x + deltanet_decode(norm(x)) by triton_backbone_deltanet: three kernels."""
    from .triton_deltanet_step import deltanet_step

    return deltanet_step(x, lw, cfg, state)


''' + _MIXER),
        replace_once(files, STEP, _ADD + _CALL, _ADD + f'''\
    if x.is_cuda or {SWITCH}:
        x = _deltanet_kernels(x, lw, cfg, state)
    else:
    ''' + _CALL),
    ]


triton_backbone_deltanet = Transform(
    name="triton_backbone_deltanet",
    # an estimate, not measured: the kept engine's backbone spends 4.86 ms of its 11.8 ms frame in mixers and
    # norms, most of it in the 30 DeltaNet layers' ~40 small kernels each; triton_tower's kernels halved the tower
    # step (61 -> 6 kernels per layer), so ~2 ms of the frame
    impact={"cuda": 1.2},
    summary="run each backbone Gated DeltaNet layer of the graphed frame as three Triton kernels: norm + qkvz|ba "
            "GEMV, one step kernel (conv + SiLU, q/k L2 norms, beta, decay, delta rule on the fp32 state), and "
            "gated RMSNorm + out_proj + residual, which also shifts the conv window",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    knobs=knobs_in("triton_deltanet_step_params.py", "block_v", "num_warps"),
    apply=_apply,
    space={"block_v": (32, 16, 64), "num_warps": (4, 2, 8)},
    requires=("cuda_graph_frame", "triton_tower"),
    lesson="Not yet run on a GPU: under the Triton interpreter it matches deltanet_decode step by step (at the "
           "full model's dims too) and the engine's teacher-forced logits match the reference on drama3-tiny. "
           "The torch step is ~40 kernels per DeltaNet layer (norm casts, the conv window cat and copy, SiLU, "
           "L2 norms, gates, three bmm-sized ops on the state, the gated norm); the state tile stays in registers "
           "between decay, update and output. "
           "Programs sharing a key head read the same q/k conv rows, so the conv window is shifted by the next "
           "kernel (out_proj), not by the step kernel. Its kernels run outside inductor (torch.compiler.disable).",
)
