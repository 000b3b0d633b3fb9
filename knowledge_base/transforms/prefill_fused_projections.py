"""prefill_fused_projections: the eager model's layers (the prefill's, compiled or not) run each group of input
projections that share an input as one GEMM of the graphed frame's fused matrix: the DeltaNet's q|k|v|z and b|a,
each attention's query+gate, key and value, the tower MLP's gate and up. The wiring helper lives in
templates/prefill_fused_projections/.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once, template_files

ENGINE, DELTANET, ATTENTION, TOWER = "graph_engine.py", "deltanet.py", "attention.py", "tower.py"
_PROGRAM = "                                    model.tower.input_frame_embedding)\n"
_DELTANET_INIT = "        self.conv_channels = 2 * kd + vd\n"
_DELTANET_CALL = """\
        q, k, v, z = F.linear(x, self.in_proj_qkvz).split((kd, kd, vd, vd), dim=-1)
        b, a = F.linear(x, self.in_proj_ba).split((self.nv, self.nv), dim=-1)
"""
_ATTENTION_INIT = "        self.geo = geo\n"
_ATTENTION_CALL = """\
        qg = F.linear(x, self.q_proj).view(T, g.num_heads, 2, g.head_dim)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = F.linear(x, self.k_proj).view(T, g.num_kv_heads, g.head_dim)
        v = F.linear(x, self.v_proj).view(T, g.num_kv_heads, g.head_dim)
"""
_TOWER_INIT = "        self.final_norm = take(weights, f\"{p}final_norm.weight\", (h,), device)\n"
_TOWER_MLP = """\
        x = x + swiglu(rms_norm(x, self.post_attention_layernorm, self.eps), self.gate_proj, self.up_proj,
                       self.down_proj)
"""


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        *template_files(files, "prefill_fused_projections"),
        replace_once(files, ENGINE, _PROGRAM, _PROGRAM + """\
        share_projections(model, self.program.w)  # the prefill's layers: one GEMM per group of projections
"""),
        replace_once(files, ENGINE, "from .static_state import StaticState\n",
                     "from .shared_projections import share_projections\nfrom .static_state import StaticState\n"),
        replace_once(files, DELTANET, _DELTANET_INIT, _DELTANET_INIT + """\
        self.in_proj = None  # q|k|v|z and b|a as one matrix, where a graph engine shares its frame's
"""),
        replace_once(files, DELTANET, _DELTANET_CALL, """\
        if self.in_proj is None:
            qkvz, ba = F.linear(x, self.in_proj_qkvz), F.linear(x, self.in_proj_ba)
        else:
            qkvz, ba = self.in_proj(x)
        q, k, v, z = qkvz.split((kd, kd, vd, vd), dim=-1)
        b, a = ba.split((self.nv, self.nv), dim=-1)
"""),
        replace_once(files, ATTENTION, _ATTENTION_INIT, _ATTENTION_INIT + """\
        self.qkv = None  # query+gate, key and value as one matrix, where a graph engine shares its frame's
"""),
        replace_once(files, ATTENTION, _ATTENTION_CALL, """\
        if self.qkv is None:
            qg, k, v = F.linear(x, self.q_proj), F.linear(x, self.k_proj), F.linear(x, self.v_proj)
        else:
            qg, k, v = self.qkv(x)
        qg = qg.view(T, g.num_heads, 2, g.head_dim)
        q, gate = qg[:, :, 0], qg[:, :, 1]
        k = k.view(T, g.num_kv_heads, g.head_dim)
        v = v.view(T, g.num_kv_heads, g.head_dim)
"""),
        replace_once(files, TOWER, _TOWER_INIT, _TOWER_INIT + """\
        self.gate_up = None  # gate and up as one matrix, where a graph engine shares its frame's
"""),
        replace_once(files, TOWER, _TOWER_MLP, """\
        h = rms_norm(x, self.post_attention_layernorm, self.eps)
        if self.gate_up is None:
            x = x + swiglu(h, self.gate_proj, self.up_proj, self.down_proj)
        else:
            gate, up = self.gate_up(h)
            x = x + F.linear(F.silu(gate) * up, self.down_proj)
"""),
    ]


prefill_fused_projections = Transform(
    name="prefill_fused_projections",
    # the decode frame does not run this code: no frames/s gain
    impact={"cuda": 1.0},
    # measured on the H200 together with deltanet_conv_unfold, on top of triton_prefill_route (session 19,
    # docs/measurements/2026-12-05_h200_s19_prefill_fast_check.json): TTFA 19.5/25.8/28.0 -> 18.8/24.6/28.4 ms over
    # the three prompts (1.04/1.05/0.99x), prefill kernels 23.1 -> 22.0 ms; half of that pair's 1.024x (geometric
    # mean) each
    first_audio={"cuda": 1.01},
    summary="run the prefill's input projections that share an input (DeltaNet q|k|v|z and b|a, attention "
            "query+gate|key|value, tower MLP gate|up) as one GEMM each, of the graphed frame's fused matrices: "
            "fewer, larger GEMMs and no second copy of the weights",
    feature="prefill",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame",),
    lesson="The frame's decode weights hold these groups concatenated already (fuse_projections); sharing them "
           "costs no memory. Each output column is the same dot product; the GEMM kernels cuBLAS picks may round "
           "differently.",
)
