"""triton_deltanet_prep: in the prefill, a DeltaNet layer's way from its in-projection to the delta rule (the conv
over [q|k|v] with the state's left context, SiLU, the q/k L2 norms and head repeat, beta and g, the next conv state)
as one Triton kernel, called with the delta rule (deltanet.delta_rule: triton_deltanet's kernel, or another
transform's) through one custom op. The engine's CPU path keeps the torch ops. The kernel files live in
templates/triton_deltanet_prep/.
"""
from __future__ import annotations

from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

DELTANET = "deltanet.py"
_START = "        mixed = torch.cat((q, k, v), dim=-1)  # (T, channels)\n"
_END = "        o = delta_rule_op("
_NEW_STATE = "        if state is None:\n            state = self.new_state(x.dtype, x.device)\n"
_IMPORT = "from .prefill_ops import delta_rule_op\n"
_CONV = "        self.conv = take(weights, f\"{prefix}conv1d.weight\", (self.conv_channels, 1, self.kernel), device)\n"

KNOBS = Knobs("deltanet_prep_params.py", "triton_deltanet_prep", {
    "block_t": "prompt rows per program (each program one value head)",
    "num_warps": "",
})


def _torch_front(files: Files) -> str:
    """deltanet.py's lines from the conv's input to the delta rule's call, inclusive: the part the kernel
    replaces on CUDA (their exact text varies with the conv's form: conv1d or deltanet_conv_unfold)."""
    source = files.get(DELTANET, "")
    if source.count(_START) != 1 or source.count(_END) != 1 or source.count(_NEW_STATE) != 1:
        raise NotApplicable(f"{DELTANET}: the DeltaNet front this transform rewrites is not there (or is ambiguous)")
    start = source.index(_START)
    end = source.index("\n", source.index(_END)) + 1
    if not start < source.index(_NEW_STATE) < end:
        raise NotApplicable(f"{DELTANET}: the DeltaNet front's state is not made where this transform expects it")
    return source[start:end]


def _apply(files: Files, params: Params) -> list[Patch]:
    front = _torch_front(files)
    torch_path = "".join("    " + line if line.strip() else line
                         for line in front.replace(_NEW_STATE, "").splitlines(keepends=True))
    return [
        *template_files(files, "triton_deltanet_prep"),
        KNOBS.patch(KNOBS.powers_of_two(params)),
        Patch(DELTANET, front, _NEW_STATE + """\
        if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # triton_deltanet_prep: one kernel to the rule
            o, state.conv = prepped_delta_rule_op(q, k, v, b, a, self.conv_taps, state.conv, self.A_log, self.dt_bias,
                                                  state.recurrent, state.valid, self.dk)
        else:
""" + torch_path),
        replace_once(files, DELTANET, _IMPORT, _IMPORT + "from .deltanet_prep_op import prepped_delta_rule_op\n"),
        replace_once(files, DELTANET, _CONV, _CONV + """\
        # triton_deltanet_prep: the taps as (kernel, channels), each contiguous like the rows the kernel reads
        self.conv_taps = self.conv[:, 0, :].t().contiguous()
"""),
    ]


triton_deltanet_prep = Transform(
    name="triton_deltanet_prep",
    # measured with prefill_first_frame on an H100 (session 28, docs/benchmarks.md; scripts/gpu_fast_check.py,
    # 200-frame streams side by side on the leap's stack): time to first audio 1.07-1.09x for the pair, frames/s
    # unchanged; its share assumed half (session 25's profile: ~1.1 ms of 16.5 ms in the launches it replaces)
    first_audio={"cuda": 1.04},
    proven=frozenset({"cuda"}),
    summary="run the prefill DeltaNet's conv + SiLU, q/k L2 norms and head repeat, beta/g gates and conv-state "
            "carry as one Triton kernel per layer (reading the in-projection in place), then the delta rule kernel, "
            "in one custom op: ~11 fewer launches per DeltaNet layer of the graphed prefill",
    feature="gated_deltanet",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_deltanet_prep",),
    apply=_apply,
    # defaults: compiled for sm_90 at full dims (scripts/ptx_order.py), one warp issues every load of its rows before
    # its first barrier (1 round trip; 4 rows: 117 registers, 8 rows: 204); 2 or 4 warps put a barrier between the
    # conv taps' loads (14 round trips)
    space={"block_t": (4, 8, 2), "num_warps": (1, 2)},
    requires=("triton_deltanet", "cuda_graph_prefill"),
    lesson="The graphed, inductor-compiled prefill spends its non-expert time on many small kernels: each DeltaNet "
           "layer made the delta rule's five fp32 inputs through ~11 of them (concatenation, conv taps, norms, "
           "copies that make views contiguous, the conv state's gather), each a few us at prompt sizes whatever "
           "its bytes. Every (row, value head) is independent up to the recurrence, so one kernel computes them "
           "all from the projection's output in place; the sequential part stays in triton_deltanet's kernel.",
)
