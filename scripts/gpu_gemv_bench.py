"""Tiles of triton_tower's GEMV kernels at the graphed frame's shapes, against cuBLAS, on the GPU:

    python3 scripts/gpu_gemv_bench.py [--out gemv.json] [--budget-s 240]

The frame's dense layers are one-row GEMVs (tower and backbone-attention q|k|v, tower gate|up, o_proj, down, the
DeltaNet in_proj and out_proj), so their tiles decide most of its time once launches are few. Each (shape,
kernel, tiles) is captured as a CUDA graph of launches on distinct weight copies (more bytes than L2 holds, as
in the frame, where every layer's weights are read once) and replayed; the table gives us per launch and the
achieved GB/s, fastest first, next to cuBLAS (F.linear). Nothing here decides anything: it says which tiles to
give the transforms' defaults (session 8 it also showed that the residual GEMVs ran at half the bandwidth while
they reduced once per K chunk; they now keep a 2-D accumulator). Needs CUDA.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.bench import graph_ms
from scripts.gpu_fast_check import recipe_module

DEVICE = torch.device("cuda")
L2_BYTES = 200 << 20  # the weight copies of one graph: several times the H200's 50 MB L2
TILES = [(bn, bk, warps) for bn in (4, 8, 16, 32) for bk in (256, 512, 1024) for warps in (4, 8)]
# one or two warps (measured in session 15): a one-warp program's reductions are warp shuffles with no block
# barrier, and its sm_90 PTX issues every chunk's loads at once; tiles of at most 128 weights per thread per chunk
TILES += [(bn, bk, warps) for bn in (2, 4, 8) for bk in (256, 512, 1024) for warps in (1, 2)
          if bn * bk <= 128 * 32 * warps]
_FIRST = next(triton_tower.variants())
# (block_n, block_k, warps) the transform applies by default: [norm GEMVs, residual GEMVs]
DEFAULTS = [tuple(_FIRST[k] for k in ("block_n", "block_k", "gemv_warps")),
            tuple(_FIRST[k] for k in ("residual_block_n", "residual_block_k", "residual_warps"))]


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    kind: str  # "norm" (norm_gemv), "swiglu" (norm_gemv of gate and up), "residual" (residual_gemv)
    rows: int
    cols: int
    per_frame: int  # launches of this shape in one full-size frame


# most launches per frame first (o_proj's shape is also the DeltaNet out_proj's, 30 more with those kernels)
SHAPES = [Shape("o_proj", "residual", 2048, 4096, 23), Shape("deltanet in_proj", "norm", 12352, 2048, 30),
          Shape("attention q|k|v", "norm", 9216, 2048, 23), Shape("tower gate|up", "swiglu", 6144, 2048, 13),
          Shape("tower down", "residual", 2048, 6144, 13)]


@dataclass(frozen=True, slots=True)
class Row:
    shape: str
    kernel: str
    block_n: int
    block_k: int
    num_warps: int
    us: float
    gb_per_s: float


def _graph_us(launches: list[Callable[[], None]], replays: int = 20) -> float:
    """Mean us per launch of `launches` captured in one CUDA graph."""
    return graph_ms(lambda: [launch() for launch in launches], replays) * 1000 / len(launches)


def _launches(kernels, shape: Shape, tiles: tuple[int, int, int] | None, kernel: str) -> list[Callable[[], None]]:
    """One launch per weight copy of `shape` through `kernel` ("triton", "cublas") with `tiles`."""
    dev, dt = DEVICE, torch.bfloat16
    mats = 2 if shape.kind == "swiglu" else 1
    copies = max(4, -(-L2_BYTES // (mats * shape.rows * shape.cols * 2)))
    weights = [[torch.randn(shape.rows, shape.cols, device=dev, dtype=dt) * shape.cols ** -0.5 for _ in range(mats)]
               for _ in range(copies)]
    x = torch.randn(1, shape.cols, device=dev, dtype=dt)
    gain = torch.ones(shape.cols, device=dev)
    res = torch.randn(1, shape.rows, device=dev, dtype=dt)
    out = torch.empty(shape.rows, device=dev, dtype=dt)
    ticket = torch.zeros(1, dtype=torch.int32, device=dev)
    if kernel == "cublas":  # the GEMVs only (and SiLU * up): the weight reads are what counts
        return [lambda w=w: F.silu(F.linear(x, w[0])) * F.linear(x, w[-1]) if mats == 2 else F.linear(x, w[0])
                for w in weights]
    bn, bk, warps = tiles
    if shape.kind == "residual":
        return [lambda w=w: kernels._residual_gemv_kernel[(shape.rows // bn,)](
            x, w[0], res, out, gain, out, ticket, 1e-6, shape.cols, shape.rows, False, bn, bk, bk, num_warps=warps)
            for w in weights]
    swiglu = shape.kind == "swiglu"
    return [lambda w=w: kernels._norm_gemv_kernel[(shape.rows // bn,)](
        x, gain, w[0], w[-1], w[0], out, 1e-6, shape.cols, shape.rows, 0 if swiglu else shape.rows, swiglu, bn, bk,
        num_warps=warps) for w in weights]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new shape after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    kernels = recipe_module((("cuda_graph_frame", {}), ("triton_tower", {})), "triton_tower", "gemv_bench_engine")
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows: list[Row] = []
    for shape in SHAPES:
        if time.monotonic() - started > args.budget_s:
            print(f"budget spent: {shape.name} and later shapes not run")
            break
        mats = 2 if shape.kind == "swiglu" else 1
        nbytes = mats * shape.rows * shape.cols * 2
        found = []
        candidates = [("cublas", None)] + [("triton", t) for t in TILES if t[1] <= shape.cols]
        for kernel, tiles in candidates:
            try:
                us = _graph_us(_launches(kernels, shape, tiles, kernel))
            # a tile the compiler refuses (registers, shared memory): reported, skipped
            except (CompilationError, OutOfResources) as exc:
                print(f"  {shape.name} {kernel} {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            bn, bk, warps = tiles or (0, 0, 0)
            found.append(Row(shape.name, kernel, bn, bk, warps, round(us, 2), round(nbytes / us / 1e3, 1)))
        found.sort(key=lambda r: r.us)
        rows += found
        default = next((r for r in found if (r.kernel, r.block_n, r.block_k, r.num_warps) ==
                        ("triton", *DEFAULTS[shape.kind == "residual"])), None)
        print(f"\n{shape.name}: ({shape.rows} x {shape.cols}) bf16, {shape.per_frame} per frame; default tiles "
              f"{default.us if default else '-'} us")
        print(f"  {'kernel':8} {'BN':>4} {'BK':>5} {'warps':>5} {'us':>8} {'GB/s':>8}")
        shown = found[:6] + [r for r in found[6:] if r.kernel == "cublas" or r is default]
        for r in shown:
            print(f"  {r.kernel:8} {r.block_n:4d} {r.block_k:5d} {r.num_warps:5d} {r.us:8.2f} {r.gb_per_s:8.1f}")
        if args.out:
            args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
