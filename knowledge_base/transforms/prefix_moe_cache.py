"""prefix_moe_cache: the graphed prefill reuses the routed-expert outputs of the leading rows a prompt shares with the
previous prompt within its system turn (the instruction and any voice references, up to the first <|im_end|>), so
those rows read no expert. A prompt's rows reach most experts of every layer: hello's 56 rows ~83% of them, the 24
past a shared 32-row system turn ~53%.

In-run prefix caching, declared: the cache is the engine's device memory, the rows are compared on the device
inside the graph, and a row's routed output depends only on the rows up to it (causal), so an equal prefix has the
same outputs (up to the rounding of the bucket that computed them). Everything else (attention, DeltaNet, dense
projections, the shared expert) still runs on every row. Only the system turn is reused, never the user's text: a
benchmark that repeats one text with a fresh last word would otherwise time a cache, not a prefill.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once

MOE, PROGRAM = "moe.py", "prefill_program.py"
_VALID = ("        self.valid: torch.Tensor | None = None  # a padded prefill's prompt rows (on the device): the rest "
          "route nowhere\n")
_ROUTED = "            return self._fused(x, weights, experts, shared)\n"
_FUSED_OUT = '''\
                                  self.down_scale, self.block)
        return (out + shared.float()).to(x.dtype)
'''
_LOOP_SHARED = "        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)\n"
_CALL = "    def __call__(self, x: torch.Tensor) -> torch.Tensor:\n"
_ROWS = "        self.rows = torch.zeros((self.capacity, ROW_WIDTH), dtype=torch.long, device=state.device)\n"
_BACKBONE = "        backbone = self.model.backbone  # Backbone.__call__, a layer at a time\n"
_SET_VALID = ("            layer.moe.valid = self.length  # the padding rows go to no expert: their picks would read "
              "weights\n")
_UNSET_VALID = "            layer.moe.valid = None  # every row of an eager call outside this program is real\n"
_NORM = "        hidden = rms_norm(x, backbone.norm, backbone.eps)\n"

KNOBS = Knobs("prefix_cache_params.py", "prefix_moe_cache", {
    "prefix_rows": "leading prompt rows whose routed-expert outputs each MoE layer keeps for the next prompt",
})


def _moe_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, MOE, _VALID, _VALID + """\
        # prefix_moe_cache: rows below `prefix` ((1,) int64 on the device) begin as the previous prompt began; their
        # routed output is `cached` ((PREFIX_ROWS, hidden) float32, the previous prompt's first rows)
        self.prefix: torch.Tensor | None = None
        self.cached: torch.Tensor | None = None
"""),
        replace_once(files, MOE, _ROUTED, """\
            if self.prefix is not None:  # prefix_moe_cache: a reused row reads no expert
                experts = torch.where(self._reused(x.shape[0])[:, None], -1, experts)
""" + _ROUTED),
        replace_once(files, MOE, _FUSED_OUT, _FUSED_OUT.replace("        return", "        out = self._reuse(out)\n"
                                                                               "        return")),
        replace_once(files, MOE, _LOOP_SHARED, "        out = self._reuse(out)\n" + _LOOP_SHARED),
        replace_once(files, MOE, _CALL, '''\
    def _reused(self, rows: int) -> torch.Tensor:
        """(rows,) bool: the rows whose routed output prefix_moe_cache takes from `cached`."""
        return torch.arange(rows, device=self.prefix.device) < self.prefix

    def _reuse(self, out: torch.Tensor) -> torch.Tensor:
        """The routed output `out` (T, hidden) float32 with the reused rows' from `cached`, whose rows then become
        this prompt's (prefix_moe_cache)."""
        if self.prefix is None:
            return out
        n = min(out.shape[0], self.cached.shape[0])
        head = torch.where(self._reused(n)[:, None], self.cached[:n], out[:n])
        self.cached[:n].copy_(head)
        return torch.cat((head, out[n:]))

''' + _CALL),
    ]


def _program_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, PROGRAM, "from .prefill_graph_params import COMPILE_STEPS\n",
                     "from .prefill_graph_params import COMPILE_STEPS\nfrom .prefix_cache_params import PREFIX_ROWS\n"),
        replace_once(files, PROGRAM, _ROWS, _ROWS + """\
        # prefix_moe_cache: the last prompt's first PREFIX_ROWS rows and how many of them were real; each MoE
        # layer keeps their routed outputs
        self.last_rows = torch.zeros((PREFIX_ROWS, ROW_WIDTH), dtype=torch.long, device=state.device)
        self.last_length = torch.zeros(1, dtype=torch.long, device=state.device)
        for layer in model.backbone.layers:
            layer.moe.cached = torch.zeros((PREFIX_ROWS, config.hidden_size), dtype=torch.float32,
                                           device=state.device)
"""),
        replace_once(files, PROGRAM, _BACKBONE, """\
        # prefix_moe_cache: the leading rows equal to the last prompt's, within both prompts' real rows and this
        # prompt's system turn (through its first <|im_end|>)
        n = min(bucket, PREFIX_ROWS)
        same = (rows[:n] == self.last_rows[:n]).all(1).long().cumprod(0).sum().reshape(1)
        system = (rows[:n, 0] == self.config.eos_token_id).long().cumsum(0).eq(0).sum().reshape(1) + 1
        prefix = torch.minimum(torch.minimum(same, system), torch.minimum(self.last_length, self.length))
""" + _BACKBONE),
        replace_once(files, PROGRAM, _SET_VALID, _SET_VALID + "            layer.moe.prefix = prefix\n"),
        replace_once(files, PROGRAM, _UNSET_VALID, _UNSET_VALID + "            layer.moe.prefix = None\n"),
        replace_once(files, PROGRAM, _NORM, """\
        self.last_rows[:n].copy_(rows[:n])  # prefix_moe_cache: what the next prompt is compared with
        self.last_length.copy_(self.length.clamp(max=n))
""" + _NORM),
    ]


def _apply(files: Files, params: Params) -> list[Patch]:
    rows = KNOBS.powers_of_two(params)["prefix_rows"]
    return [KNOBS.patch({"prefix_rows": rows}), *_moe_patches(files), *_program_patches(files)]


prefix_moe_cache = Transform(
    name="prefix_moe_cache",
    # measured on an H100 (session 25, docs/benchmarks.md), each prompt after itself: the routed experts' kernels
    # of hello's prefill 8.30 -> 5.45 ms, prefill walls 17.1 / 22.1 / 24.4 -> 14.5 / 21.8 / 20.9 ms (hello /
    # sentences / voice, with the codec items). In the evaluator's rotation hello follows a prompt with the same
    # system turn, voice one without its reference rows: ~2.5 ms of hello's TTFA, little of the others'
    first_audio={"cuda": 1.04},
    summary="reuse, in the graphed prefill, the routed-expert outputs of the system-turn rows a prompt shares with "
            "the previous one (declared in-run prefix caching), so those rows read no expert weights",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    apply=_apply,
    space={"prefix_rows": (256, 128, 512)},
    requires=("cuda_graph_prefill", "triton_prefill_route"),
    lesson="A prefill's cost past the dense weights is the routed experts its rows reach (hello's rows ~68% of "
           "the 10240 expert matrices, 22 GB of FP8; the 135-209-row prompts ~97%). Every prompt without a voice "
           "reference starts with the same ~29-32-row system turn, whose per-token routed outputs are the same each "
           "time (causal); only that turn is reused, never the user's text. The comparison with the last prompt's "
           "rows and the reuse run inside the prefill graph, on the device; attention, DeltaNet and the dense "
           "projections still run on every row. The cached outputs come from another bucket's GEMMs, so they "
           "differ from a recomputation by rounding only; a reused row's own output (no expert: zeros) must never "
           "overwrite its cached one. On the H100 hello's expert kernels fell 8.30 -> 5.45 ms; sentences gained "
           "~0.3 ms (its other rows reach nearly every expert anyway).",
)
