"""triton_moe_one_launch: the graphed decode frame's MoE experts (triton_moe_fused's gate|up and down kernels, as
triton_moe_block calls them) as one launch per layer: the down programs issue their weight loads while the
gate|up programs still run, then wait on a per-layer counter in the frame's static state for h. The kernel file
lives in templates/triton_moe_one_launch/.
"""
from __future__ import annotations

from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

STEP, STATE, BLOCK, FUSED = "decode_step.py", "static_state.py", "moe_block.py", "fused_moe.py"
_IMPORT = "            from .moe_block import moe_block\n"
_TOWER_CACHES = "                      for _ in range(config.num_tower_layers)]\n"
_LOOP = "            for lw, cache in zip(self.w.layers, self.state.backbone):\n"
_CALL = "                x = moe_block(x, lw.post_gain, lw.moe, cfg)\n"

KNOBS = Knobs("moe_one_launch_params.py", "triton_moe_one_launch", {
    "block_n": "intermediate rows per gate|up program: k * I / BLOCK_N of them",
    "block_k": "hidden columns per unrolled gate|up load (whole FP8 blocks)",
    "down_block_n": "output rows per down program: hidden / DOWN_BLOCK_N of them",
    "down_block_k": "intermediate columns per unrolled down load (at most the FP8 block)",
    "num_warps": "every program's, gate|up and down alike (one launch)",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    sizes = KNOBS.powers_of_two(params)
    if _CALL not in files.get(STEP, ""):
        raise NotApplicable("triton_moe_one_launch: apply triton_moe_block first (its layer loop calls moe_block)")
    for path, helper, owner in ((FUSED, "def _down_tile(", "triton_moe_fused"),
                                (BLOCK, "def norm_projection(", "triton_moe_block")):
        if helper not in files.get(path, ""):
            raise NotApplicable(f"triton_moe_one_launch: {path} predates the helpers its kernel file calls; renew "
                                f"{owner} first")
    return [
        *template_files(files, "triton_moe_one_launch"),
        KNOBS.patch(sizes),
        replace_once(files, STATE, _TOWER_CACHES, _TOWER_CACHES + """\
        # triton_moe_one_launch: each backbone layer's counters (h tiles written, down tiles done), zero between
        # launches; per engine, so instances serving streams at once never share them
        self.moe_sync = torch.zeros((b.num_layers, 2), dtype=torch.int32, device=device)
"""),
        replace_once(files, STEP, _LOOP, _LOOP.replace("cache in zip(", "cache, sync in zip(").replace(
            "self.state.backbone)", "self.state.backbone, self.state.moe_sync)")),
        replace_once(files, STEP, _CALL, "                x = moe_block(x, lw.post_gain, lw.moe, cfg, sync)\n"),
        replace_once(files, STEP, _IMPORT, _IMPORT.replace(".moe_block import", ".moe_one_launch import").replace(
            "\n", "  # triton_moe_one_launch\n")),
    ]


triton_moe_one_launch = Transform(
    name="triton_moe_one_launch",
    # no prior: session 16's launch-cost fit on the H200 (docs/benchmarks.md) put each graphed launch at ~2 us and
    # the down kernel ~1.7 us above the line for its wait on the expert ids (~3 us x 40 layers of a ~2.5 ms frame
    # to win), but the first version, polling the counter with atomics, took the MoE block from 21.22 to 25.48 us
    # a layer on the H100 (session 31, scripts/gpu_moe_one_launch_bench.py); polling by loads is not yet timed
    summary="run each backbone layer's decode MoE experts (triton_moe_fused's gate|up and down kernels) as one "
            "launch: the down programs route themselves, load their weights while the gate|up programs run, then "
            "wait on a per-layer counter for h; one launch fewer per layer, bit for bit the same output",
    feature="fp8_moe",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_moe_one_launch",),
    apply=_apply,
    # the tiles where both kernels were near their best at one warp count (2) in session 15's H200 sweep
    # (docs/measurements/2026-12-04_h200_s15_moe.json): gate|up 8/1024 9.19 us (best 8.78), down 4/128 6.46 (6.39)
    space={"block_n": (8, 4, 2, 16), "block_k": (1024, 2048, 512), "down_block_n": (4, 8, 16),
           "down_block_k": (128, 64), "num_warps": (2, 4, 1)},
    requires=("triton_moe_block",),
    lesson="The graphed frame pays ~2 us per launch whatever the launch reads, and triton_moe_fused's down kernel "
           "could issue no weight load before the gate|up kernel ended. In one launch the down programs route "
           "from the router logits themselves and stream their FP8 tiles while the gate|up programs run; only "
           "their read of h waits, on a counter the gate|up programs release. It relies on programs starting in "
           "id order (gate|up first), as NVIDIA GPUs and Triton's interpreter schedule them; all programs share "
           "one num_warps, so the tiles are a compromise between the two kernels' best.",
)
