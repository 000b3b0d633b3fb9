"""prefix_slots_in_place: prefix_moe_slots without its two whole-cache copies. prefix_moe_slots loads the chosen
slot's routed outputs for every MoE layer into a working buffer before the backbone (an index_select and a copy of
up to 40 x 256 rows x hidden float32) and stores the buffer back after it (an index_copy): on an H100 0.26 ms of the
voice prompt's prefill kernels (session 37's profile). Here each MoE layer reads its reused rows straight from the
loaded slot and writes its rows straight into the slot the prompt goes to, in the ops prefix_moe_cache already runs
per layer (a gather in place of a slice, an index_copy in place of a copy), so the copies go.
"""
from __future__ import annotations

from .base import Files, NotApplicable, Params, Patch, Transform, replace_once

MOE, PROGRAM = "moe.py", "prefill_program.py"
_SLOTS_DOC = """\
        # prefix_moe_slots: SLOTS earlier prompts' first rows, real lengths, last uses and routed outputs (slot,
        # layer, row, hidden); a prefill reads and rewrites one of them in `working`, of which each MoE layer's
        # `cached` is a view
"""
_WORKING = """\
        self.working = torch.zeros((1, layers, PREFIX_ROWS, config.hidden_size), dtype=torch.float32,
                                   device=state.device)
        for i, layer in enumerate(model.backbone.layers):
            layer.moe.cached = self.working[0, i]
"""
_LOAD = "        self.working[:, :, :n].copy_(self.slot_outputs[:, :, :n].index_select(0, best))\n"
_STORE = "        self.slot_outputs[:, :, :n].index_copy_(0, home, self.working[:, :, :n])\n"
_HOME = "        home = torch.where(prefix == system, best, self.slot_used.argmin().reshape(1))\n"
_SET = "            layer.moe.prefix = prefix\n"
_UNSET = "            layer.moe.prefix = None\n"
_CACHED_DOC = """\
        # prefix_moe_cache: rows below `prefix` ((1,) int64 on the device) begin as the previous prompt began; their
        # routed output is `cached` ((PREFIX_ROWS, hidden) float32, the previous prompt's first rows)
        self.prefix: torch.Tensor | None = None
        self.cached: torch.Tensor | None = None
"""
_REUSE = """\
        n = min(out.shape[0], self.cached.shape[0])
        head = torch.where(self._reused(n)[:, None], self.cached[:n], out[:n])
        self.cached[:n].copy_(head)
"""


def _apply(files: Files, params: Params) -> list[Patch]:
    if _WORKING not in files.get(PROGRAM, ""):
        raise NotApplicable("prefix_slots_in_place needs prefix_moe_slots (its working buffer in prefill_program.py)")
    return [
        replace_once(files, PROGRAM, _SLOTS_DOC, """\
        # prefix_moe_slots: SLOTS earlier prompts' first rows, real lengths, last uses and routed outputs (slot,
        # layer, row, hidden); each MoE layer's `cached` is its (slot, row, hidden) view, which it reads from the
        # loaded slot and writes into the prompt's own (prefix_slots_in_place)
"""),
        replace_once(files, PROGRAM, _WORKING, """\
        for i, layer in enumerate(model.backbone.layers):
            layer.moe.cached = self.slot_outputs[:, i]
"""),
        replace_once(files, PROGRAM, _LOAD, ""),
        replace_once(files, PROGRAM, _STORE, ""),
        replace_once(files, PROGRAM, _HOME, _HOME + "        slots = torch.cat((best, home))  # prefix_slots_in_place: "
                                                    "each MoE layer reads the one, writes the other\n"),
        replace_once(files, PROGRAM, _SET, _SET + "            layer.moe.slots = slots\n"),
        replace_once(files, PROGRAM, _UNSET, _UNSET + "            layer.moe.slots = None\n"),
        replace_once(files, MOE, _CACHED_DOC, """\
        # prefix_moe_cache: rows below `prefix` ((1,) int64 on the device) begin as the previous prompt began; their
        # routed output is in `cached` ((SLOTS, PREFIX_ROWS, hidden) float32: earlier prompts' first rows), read from
        # slot slots[0] and this prompt's written to slot slots[1] ((2,) int64 on the device, prefix_slots_in_place)
        self.prefix: torch.Tensor | None = None
        self.cached: torch.Tensor | None = None
        self.slots: torch.Tensor | None = None
"""),
        replace_once(files, MOE, _REUSE, """\
        n = min(out.shape[0], self.cached.shape[1])
        loaded = self.cached[:, :n].index_select(0, self.slots[:1])[0]
        head = torch.where(self._reused(n)[:, None], loaded, out[:n])
        self.cached[:, :n].index_copy_(0, self.slots[1:], head[None])
"""),
    ]


prefix_slots_in_place = Transform(
    name="prefix_slots_in_place",
    # an estimate, not a measurement: the copies it removes took 0.26 ms of voice's 16.6 ms of prefill kernels on
    # an H100 (session 37's profile, 209 rows), about a third of that for hello's 64-row bucket
    first_audio={"cuda": 1.008},
    summary="let each MoE layer read prefix_moe_slots' loaded slot and write the prompt's slot directly, instead "
            "of copying the whole slot into a working buffer before the backbone and back after it",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("prefix_moe_slots",),
    lesson="A cache kept in several slots need not be staged: when the consumer already touches the cached rows "
           "once per layer (a select, a write-back), pointing it at the chosen slot by a device index costs the "
           "same ops, while loading the slot into a working buffer and storing it back adds two passes over "
           "every layer's rows (0.26 ms of an H100 prefill at 209 rows).",
)
