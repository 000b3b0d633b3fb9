"""prefill_state_zero: a request's Gated DeltaNet states zeroed by two kernels inside the prefill graph, not by two
eager launches per DeltaNet layer before it. StaticState.reset ran conv.zero_() and recurrent.zero_() for each of
the 30 DeltaNet layers on the host before the prefill graph's replay: 60 launches of ~1 us of work each, with the
GPU idle between them while the host issues the next, all on the way to the first audio. Here every layer's states
are views of one conv and one recurrent buffer (layer-major, each view contiguous as before), and the prefill
program zeroes both buffers first thing, so the zeroing is captured into the graph it starts.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once, require_files

STATE, PROGRAM = "static_state.py", "prefill_program.py"
_NEEDS = {STATE: "cuda_graph_frame", PROGRAM: "cuda_graph_prefill"}

_STATES = """\
        self.backbone: list[StaticKVCache | DeltaNetState] = [
            StaticKVCache(n, b.num_key_value_heads, b.head_dim, dtype, device) if b.is_full_attention(i)
            else DeltaNetState.zeros(b.linear_conv_kernel, 2 * kd + vd, b.linear_num_value_heads,
                                     b.linear_key_head_dim, b.linear_value_head_dim, dtype, device)
            for i in range(b.num_layers)
        ]
"""
_RESET = """\
            else:
                cache.conv.zero_()
                cache.recurrent.zero_()
"""
_RUN = "        rows, positions = self.rows[:bucket], self.state.buf.rows[:bucket]\n"


def _apply(files: Files, params: Params) -> list[Patch]:
    require_files(files, "prefill_state_zero", _NEEDS)
    return [
        replace_once(files, STATE, _STATES, """\
        # prefill_state_zero: the DeltaNet layers' states are views of one buffer per kind, which the prefill graph
        # zeroes in two kernels (reset no longer does, layer by layer, from the host)
        linear = sum(not b.is_full_attention(i) for i in range(b.num_layers))
        self.deltanet_conv = torch.zeros((linear, b.linear_conv_kernel - 1, 2 * kd + vd), dtype=dtype, device=device)
        self.deltanet_recurrent = torch.zeros((linear, b.linear_num_value_heads, b.linear_key_head_dim,
                                               b.linear_value_head_dim), dtype=torch.float32, device=device)
        views = iter(zip(self.deltanet_conv, self.deltanet_recurrent))
        self.backbone: list[StaticKVCache | DeltaNetState] = [
            StaticKVCache(n, b.num_key_value_heads, b.head_dim, dtype, device) if b.is_full_attention(i)
            else DeltaNetState(*next(views)) for i in range(b.num_layers)
        ]
"""),
        replace_once(files, STATE, _RESET,
                     "            # (DeltaNet states: zeroed by the prefill program, prefill_state_zero)\n"),
        replace_once(files, PROGRAM, _RUN, _RUN + """\
        self.state.deltanet_conv.zero_()  # prefill_state_zero: a fresh request's states, inside the graph
        self.state.deltanet_recurrent.zero_()
"""),
    ]


prefill_state_zero = Transform(
    name="prefill_state_zero",
    # measured on an H100 (session 37, docs/benchmarks.md), beside the pending leap alone, each prompt after the
    # previous one: prefill 12.6 / 20.1 / 17.6 -> 12.4 / 19.8 / 17.4 ms, TTFA 14.1 / 21.9 / 19.5 -> 13.9 / 21.5 /
    # 19.4 ms; 1.013 as the three TTFA ratios' geometric mean
    first_audio={"cuda": 1.013},
    proven=frozenset({"cuda"}),
    summary="zero a request's Gated DeltaNet states inside the prefill graph, two kernels over one buffer per kind, "
            "instead of two eager launches per DeltaNet layer on the host before it",
    feature="prefill",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame", "cuda_graph_prefill"),
    lesson="Work that runs eagerly between requests is on the way to the first audio like the prefill itself: each "
           "eager launch costs a few microseconds of host time while the GPU waits. Resetting 30 DeltaNet layers' "
           "conv and recurrent states took 60 launches before the prefill graph's replay; views of two flat "
           "buffers zeroed inside the graph take two kernels and no host time.",
)
