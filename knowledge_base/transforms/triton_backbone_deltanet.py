"""triton_backbone_deltanet: the backbone's Gated DeltaNet layers of the graphed decode frame as three Triton
kernels each: RMSNorm and the qkvz|ba GEMV (triton_tower's norm_gemv), one step kernel (causal conv + SiLU, q/k
L2 norms, beta and decay, the delta rule on the fp32 state), and the gated RMSNorm with out_proj and the residual
(which also advances the conv window). That replaces ~40 torch ops per layer over 30 layers. The kernel file
lives in templates/triton_backbone_deltanet/.
"""
from __future__ import annotations

from .backbone_kernels import STEP, SWITCH, triton_switch
from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

_ADD = "    x = x + moe_out\n"
_CALL = "    x = x + deltanet_decode(norm(x, lw.input_gain, cfg.rms_norm_eps), lw.mixer, cfg, state)\n"
_MIXER = "def _deltanet_mixer("


KNOBS = Knobs("triton_deltanet_step_params.py", "triton_backbone_deltanet", {
    "block_v": "value columns per step program (capped to dv): smaller = more programs, fewer registers",
    "num_warps": "of the step kernel; the qkvz|ba GEMV takes triton_tower's",
    "out_block_n": "output rows per program of the gated-norm + out_proj kernel",
    "out_block_k": "input columns (whole heads) per unrolled chunk of that kernel",
    "out_warps": "of that kernel",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    if "triton_tower.py" not in files:  # norm_gemv and the GEMV helpers are imported from there
        raise NotApplicable("triton_backbone_deltanet: apply triton_tower first")
    sizes = KNOBS.powers_of_two(params)
    return [
        *template_files(files, "triton_backbone_deltanet"),
        KNOBS.patch(sizes),
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
    # the 30 layers' mixers alone, CUDA-graphed on the H200 (tests/gpu, docs/benchmarks.md session 8): 1.40 ms
    # with these kernels against 2.03 inductor-compiled, ~0.6 ms of the fast stack's 4.66 ms frame
    impact={"cuda": 1.12},
    summary="run each backbone Gated DeltaNet layer of the graphed frame as three Triton kernels: norm + qkvz|ba "
            "GEMV, one step kernel (conv + SiLU, q/k L2 norms, beta, decay, delta rule on the fp32 state), and "
            "gated RMSNorm + out_proj + residual, which also shifts the conv window",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_backbone_deltanet",),
    apply=_apply,
    # the out kernel's tiles: those of the same (2048 x 4096) shape in scripts/gpu_gemv_bench.py
    space={"block_v": (32, 16, 64), "num_warps": (4, 2, 8), "out_block_n": (8, 4, 16), "out_block_k": (1024, 512),
           "out_warps": (8, 4)},
    requires=("cuda_graph_frame", "triton_tower"),
    lesson="On the H200 the 30 layers' mixers, CUDA-graphed, took 1.40 ms with these kernels after "
           "inductor-compiled steps against 2.03 ms with inductor alone (1.58 against 3.93 for the torch step); "
           "the kernels match deltanet_decode step by step there and the drama3-tiny and drama3-mid engines pass "
           "the gate. "
           "The torch step is ~40 kernels per DeltaNet layer (norm casts, the conv window cat and copy, SiLU, "
           "L2 norms, gates, three bmm-sized ops on the state, the gated norm); the state tile stays in registers "
           "between decay, update and output. "
           "Programs sharing a key head read the same q/k conv rows, so the conv window is shifted by the next "
           "kernel (out_proj), not by the step kernel. Its kernels run outside inductor (torch.compiler.disable).",
)
