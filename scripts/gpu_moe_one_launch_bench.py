"""A backbone layer's MoE block at the full model's shapes, on the GPU, with triton_moe_fused's two expert kernels
(triton_moe_block as the kept engines run it) and with triton_moe_one_launch's one launch, for each of its tiles:

    python3 scripts/gpu_moe_one_launch_bench.py [--out one_launch.json] [--budget-s 120]

Each is timed as a CUDA graph of one frame's 40 layers over 8 distinct layers' weights (6.4 GB, far beyond L2),
each layer on its own counters as in the engine, and printed as us per layer, fastest first, the transform's
default tiles marked, with the ratio to the two-kernel block. Nothing here decides anything: it says whether one
launch pays and which tiles to give the defaults. Needs CUDA.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from knowledge_base.transforms.triton_moe_one_launch import triton_moe_one_launch
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from scripts.gpu_fast_check import recipe_module
from scripts.gpu_moe_block_bench import STACK, _layers

DEVICE = torch.device("cuda")
CFG = get_config("drama3").backbone
DEFAULT = next(triton_moe_one_launch.variants())
# each warp count's likeliest tiles first (session 31's first H100 sweep: 8 gate|up rows and 4 down rows on 2 warps
# fastest), then the rest of the space
_FIRST = [(2, 8, 4, 1024), (2, 8, 4, 2048), (4, 8, 4, 1024), (1, 2, 4, 2048), (4, 16, 8, 1024), (1, 4, 4, 1024)]
TILES = [{"block_n": bn, "block_k": bk, "down_block_n": dbn, "down_block_k": 128, "num_warps": w}
         for w, bn, dbn, bk in _FIRST + [t for t in itertools.product((2, 4, 1), (8, 4, 2, 16), (4, 8, 16),
                                                                      (1024, 2048)) if t not in _FIRST]]


@dataclass(frozen=True, slots=True)
class Row:
    path: str  # "two kernels" or "one launch"
    tiles: dict[str, int]
    default: bool
    us_per_layer: float
    max_error: float  # of the 40-layer output against the two kernels'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=120.0, help="start no new tile after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    two = recipe_module((*STACK, ("triton_moe_block", {})), "moe_block", "moe_two_kernels_bench_engine")
    one = recipe_module((*STACK, ("triton_moe_block", {}), ("triton_moe_one_launch", {})), "moe_one_launch",
                        "moe_one_launch_bench_engine")
    layers = _layers(sys.modules[two.__name__.rsplit(".", 1)[0]])
    x = torch.randn(1, CFG.hidden_size, device=DEVICE, dtype=torch.bfloat16)
    gain = 1 + 0.1 * torch.randn(CFG.hidden_size, device=DEVICE)
    sync = torch.zeros((CFG.num_layers, 2), dtype=torch.int32, device=DEVICE)
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"{CFG.num_layers} layers per graph over {len(layers)} distinct layers' weights", flush=True)

    def frame(step) -> torch.Tensor:
        y = x
        for i in range(CFG.num_layers):
            y = step(y, i)
        return y

    def two_kernels(y: torch.Tensor, i: int) -> torch.Tensor:
        return two.moe_block(y, gain, layers[i % len(layers)], CFG)

    def one_launch(y: torch.Tensor, i: int) -> torch.Tensor:
        return one.moe_block(y, gain, layers[i % len(layers)], CFG, sync[i])

    want = frame(two_kernels)
    base = graph_ms(lambda: frame(two_kernels), 50)
    rows = [Row("two kernels", {}, False, round(base * 1000 / CFG.num_layers, 2), 0.0)]
    for tiles in TILES:
        if time.monotonic() - started > args.budget_s:
            print("budget spent: later tiles not run")
            break
        for name, value in tiles.items():
            setattr(one, name.upper(), value)
        try:
            ms = graph_ms(lambda: frame(one_launch), 50)
            # other tiles and warps sum in another order, so not bit for bit; a down program that read h before
            # it was written would be off by far more than bf16 rounding over 40 layers
            error = (frame(one_launch).float() - want.float()).abs().max().item()
        # a tile the compiler or ptxas refuses (registers, shared memory): reported, skipped
        except Exception as exc:  # noqa: BLE001
            print(f"  {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        if sync.any():
            raise SystemExit(f"{tiles}: the counters were left non-zero: {sync.tolist()}")
        if error > 1.0:
            raise SystemExit(f"{tiles}: the 40-layer output differs from the two kernels' by {error:.3f}")
        rows.append(Row("one launch", tiles, tiles == DEFAULT, round(ms * 1000 / CFG.num_layers, 2),
                        round(error, 4)))
    found = sorted(rows[1:], key=lambda r: r.us_per_layer)
    print(f"\ntwo kernels (triton_moe_block as kept): {rows[0].us_per_layer:.2f} us per layer")
    for r in found[:8] + [r for r in found[8:] if r.default]:
        print(f"  {'*' if r.default else ' '} one launch {json.dumps(r.tiles):90} {r.us_per_layer:8.2f} us per layer "
              f"({rows[0].us_per_layer / r.us_per_layer:.3f}x, max error {r.max_error})", flush=True)
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
