"""A backbone layer's MoE half at the full model's shapes, on the GPU, before and with triton_moe_block:

    python3 scripts/gpu_moe_block_bench.py [--out moe_block.json] [--budget-s 120]

"before" is what the kept engines run per layer: the post-attention RMSNorm, cuBLAS's GEMV of the fused router |
shared-expert projection, triton_moe_fused's two kernels and the residual add; "with" is triton_moe_block's
norm + projection kernel, then the two kernels with the add in the down kernel, for each tile of its knobs. Each is
timed as a CUDA graph of one frame's 40 layers over 8 distinct layers' weights (6.4 GB, far beyond L2) and printed
as us per layer, fastest first, the transform's default tiles marked. Nothing here decides anything: it says
whether the fusion pays and which tiles to give the defaults. Needs CUDA.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from knowledge_base.transforms.triton_moe_block import triton_moe_block
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks
from scripts.gpu_fast_check import recipe_module

DEVICE = torch.device("cuda")
CFG = get_config("drama3").backbone
DISTINCT = 8  # layers of distinct weights, cycled through CFG.num_layers launches
DEFAULT = next(triton_moe_block.variants())
TILES = [{"block_n": bn, "block_k": bk, "num_warps": w}
         for bn, bk, w in itertools.product((1, 2, 4, 8, 16), (512, 1024, 2048), (2, 4, 8))]
STACK = (("cuda_graph_frame", {}), ("triton_fp8_moe", {}), ("triton_moe_fused", {}), ("triton_tower", {}),
         ("triton_backbone_attention", {}), ("triton_backbone_deltanet", {}))


@dataclass(frozen=True, slots=True)
class Row:
    path: str  # "before" or "with"
    tiles: dict[str, int]
    default: bool
    us_per_layer: float


def _layers(pkg) -> list:
    """DISTINCT layers' MoE weights (decode_weights.MoEWeights, the projection fused) at full size."""
    E, h, inter, block, shared = CFG.num_experts, CFG.hidden_size, CFG.moe_intermediate_size, CFG.fp8_block, \
        CFG.shared_expert_intermediate_size
    bf16, layers = torch.bfloat16, []
    for _ in range(DISTINCT):
        gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, h, device=DEVICE, dtype=bf16) * h ** -0.5,
                                                 block)
        down, down_scale = quantize_blocks(torch.randn(E, h, inter, device=DEVICE, dtype=bf16) * inter ** -0.5, block)
        mats = [torch.randn(n, h, device=DEVICE, dtype=bf16) * h ** -0.5 for n in (E, shared, shared, 1)]
        layers.append(pkg.decode_weights.MoEWeights(pkg.decode_weights.Projection(mats, fuse=True),
                                                    gate_up.view(torch.uint8), gate_up_scale, down.view(torch.uint8),
                                                    down_scale, torch.randn(h, shared, device=DEVICE, dtype=bf16)
                                                    * shared ** -0.5))
    return layers


def _frame(step: Callable[[torch.Tensor, object], torch.Tensor], layers: list, x: torch.Tensor
           ) -> Callable[[], None]:
    def run() -> None:
        y = x
        for i in range(CFG.num_layers):
            y = step(y, layers[i % len(layers)])
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=120.0, help="start no new tile after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    block = recipe_module((*STACK, ("triton_moe_block", {})), "moe_block", "moe_block_bench_engine")
    pkg = sys.modules[block.__name__.rsplit(".", 1)[0]]
    norm, moe_decode = pkg.decode_ops.norm, pkg.decode_moe.moe_decode
    layers = _layers(pkg)
    x = torch.randn(1, CFG.hidden_size, device=DEVICE, dtype=torch.bfloat16)
    gain = 1 + 0.1 * torch.randn(CFG.hidden_size, device=DEVICE)
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"{CFG.num_layers} layers per graph over {DISTINCT} distinct layers' weights", flush=True)
    # the engines' post-attention norm is one inductor kernel (inductor_decode_steps); eager it would be several
    normed = torch.compile(lambda y: norm(y, gain, CFG.rms_norm_eps), dynamic=False)
    before = graph_ms(_frame(lambda y, w: y + moe_decode(normed(y), w, CFG), layers, x), 50)
    rows = [Row("before", {}, False, round(before * 1000 / CFG.num_layers, 2))]
    for tiles in TILES:
        if time.monotonic() - started > args.budget_s:
            print("budget spent: later tiles not run")
            break
        block.BLOCK_N, block.BLOCK_K, block.NUM_WARPS = tiles["block_n"], tiles["block_k"], tiles["num_warps"]
        try:
            ms = graph_ms(_frame(lambda y, w: block.moe_block(y, gain, w, CFG), layers, x), 50)
        # a tile the compiler or ptxas refuses (registers, shared memory): reported, skipped
        except Exception as exc:  # noqa: BLE001
            print(f"  {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        rows.append(Row("with", tiles, tiles == DEFAULT, round(ms * 1000 / CFG.num_layers, 2)))
    found = sorted(rows[1:], key=lambda r: r.us_per_layer)
    print(f"\nbefore (norm, cuBLAS router|shared GEMV, fused MoE, add): {rows[0].us_per_layer:.2f} us per layer")
    for r in found[:8] + [r for r in found[8:] if r.default]:
        print(f"  {'*' if r.default else ' '} with {json.dumps(r.tiles):52} {r.us_per_layer:8.2f} us per layer "
              f"({rows[0].us_per_layer / r.us_per_layer:.3f}x)")
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
