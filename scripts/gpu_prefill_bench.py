"""Tiles of the prefill's kernels at the full model's shapes and the seed prompts' row counts: triton_prefill_moe's
grouped expert GEMMs and block layout, and triton_deltanet's recurrent delta rule:

    python3 scripts/gpu_prefill_bench.py [--out prefill.json] [--budget-s 200]

Session 22's profile of the voice prompt's prefill (209 rows) put the routed experts at 9.3 of its 21.3 ms of
kernels: the rows reach nearly every expert, ~32 GB of FP8, read at ~3.5 TB/s where a plain copy runs at ~4.3.
The block layout kernel, one program per layer, took another 0.9 ms, and the token-serial delta rule 3.0 ms.
This times the gate|up and down GEMMs per layer for each tile set (the transform's knobs, and num_stages, which
it leaves to Triton) over 8 layers' own expert stacks captured in one CUDA graph, so that no layer's weights
come from L2, with random top-8 routing as the random-weight router gives; it prints ms per layer and the TB/s of
the used experts' bytes, fastest first, the transform's defaults marked. Then the layout kernel alone by warps
and chunk width; then the delta rule by value columns per program and warps (one warp and
narrow tiles: its two per-token reductions over the key dim become warp shuffles with no block barrier), over
8 layers' states per graph. Nothing here decides anything: it says which tiles to give the defaults. Needs CUDA.
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

from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks
from scripts.gpu_fast_check import recipe_module

DEVICE = torch.device("cuda")
CFG = get_config("drama3").backbone
DEFAULT = next(triton_prefill_moe.variants())
DELTA_DEFAULT = next(triton_deltanet.variants())
ROWS = {"hello": 52, "voice": 209}  # the seed prompts' prefill rows (session 22's fast check)
LAYERS = 8  # 8 layers' experts are ~6 GB, far past the 50 MB L2
# num_stages None: Triton's own choice, as the transform launches the kernels
TILES = [{"block_m": 16, "block_n": bn, "num_warps": w, "num_stages": s}
         for bn, w, s in itertools.product((32, 64, 128), (4, 8), (None, 2, 3, 4, 5))]


@dataclass(frozen=True, slots=True)
class Row:
    prompt: str
    tiles: dict[str, int | None]
    default: bool
    ms_per_layer: float
    tb_per_s: float  # the used experts' FP8 bytes over the two kernels' time


@dataclass(frozen=True, slots=True)
class DeltaRow:
    prompt: str
    tiles: dict[str, int]
    default: bool
    us_per_layer: float


@dataclass(frozen=True, slots=True)
class Layer:
    gate_up: torch.Tensor
    gate_up_scale: torch.Tensor
    down: torch.Tensor
    down_scale: torch.Tensor


def _layer() -> Layer:
    E, h, inter, block = CFG.num_experts, CFG.hidden_size, CFG.moe_intermediate_size, CFG.fp8_block
    gate_up = quantize_blocks(torch.randn(E, 2 * inter, h, device=DEVICE, dtype=torch.bfloat16) * h ** -0.5, block)
    down = quantize_blocks(torch.randn(E, h, inter, device=DEVICE, dtype=torch.bfloat16) * inter ** -0.5, block)
    return Layer(*gate_up, *down)


def _routing(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random top-k over the experts, as the random router picks: (weights fp32, expert ids) of shape (rows, k)."""
    logits = torch.randn(rows, CFG.num_experts, device=DEVICE)
    top, experts = logits.softmax(-1).topk(CFG.num_experts_per_tok, dim=-1)
    return top / top.sum(-1, keepdim=True), experts


def _experts_step(grouped, layers: list[Layer], x: torch.Tensor, routes: list[tuple[torch.Tensor, torch.Tensor]],
                  tiles: dict[str, int | None]) -> Callable[[], None]:
    """Each layer's gate|up and down kernels, launched as grouped_fp8_experts launches them but with `tiles`
    (num_stages too, which the transform leaves to Triton); the block layout is made once, outside the graph."""
    E, k, h, inter, block = CFG.num_experts, CFG.num_experts_per_tok, CFG.hidden_size, CFG.moe_intermediate_size, \
        CFG.fp8_block
    bm, bn = tiles["block_m"], min(tiles["block_n"], block)
    launch = {"num_warps": tiles["num_warps"]} | ({} if tiles["num_stages"] is None else
                                                  {"num_stages": tiles["num_stages"]})
    plans = []
    for layer, (weights, experts) in zip(layers, routes):
        slot_pairs, block_experts = grouped._blocks(experts, E, bm)
        hidden = torch.empty((slot_pairs.numel(), inter), dtype=x.dtype, device=DEVICE)
        y = torch.empty((experts.numel(), h), dtype=torch.float32, device=DEVICE)
        plans.append((layer, weights.contiguous().view(-1), slot_pairs, block_experts, hidden, y))

    def step() -> None:
        for layer, weights, slot_pairs, block_experts, hidden, y in plans:
            grid = (block_experts.numel(),)
            grouped._gate_up_kernel[grid + (inter // bn,)](
                x, slot_pairs, block_experts, layer.gate_up.view(torch.uint8), layer.gate_up_scale, hidden, k, h,
                inter, block, bm, bn, True, False, **launch)
            grouped._down_kernel[grid + (h // bn,)](
                hidden, slot_pairs, block_experts, weights, layer.down.view(torch.uint8), layer.down_scale, y, h,
                inter, block, bm, bn, True, False, **launch)
    return step


def _default_tiles(rows: int) -> dict[str, int | None]:
    """The tiles the transform's defaults launch for a prompt of `rows` rows."""
    long = rows >= DEFAULT["long_rows"]
    return {"block_m": DEFAULT["block_m"], "block_n": DEFAULT["block_n_long" if long else "block_n"],
            "num_warps": DEFAULT["num_warps"], "num_stages": None}


def _used_bytes(experts: torch.Tensor) -> int:
    return experts.unique().numel() * 3 * CFG.hidden_size * CFG.moe_intermediate_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=200.0, help="start no new tile set after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    grouped = recipe_module((("triton_prefill_moe", {}),), "grouped_moe", "prefill_moe_bench_engine")
    layers = [_layer() for _ in range(LAYERS)]
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"{LAYERS} layers' experts per graph", flush=True)
    rows: list[Row] = []
    for prompt, count in ROWS.items():
        x = torch.randn(count, CFG.hidden_size, device=DEVICE, dtype=torch.bfloat16)
        routes = [_routing(count) for _ in layers]
        used = sum(_used_bytes(experts) for _, experts in routes) / LAYERS
        found = []
        for tiles in TILES:
            if time.monotonic() - started > args.budget_s:
                print(f"budget spent: later {prompt} tiles not run")
                break
            step = _experts_step(grouped, layers, x, routes, tiles)
            try:
                ms = graph_ms(step, 20) / LAYERS
            # a tile the compiler or ptxas refuses (registers, shared memory): reported, skipped
            except Exception as exc:  # noqa: BLE001
                print(f"  {prompt} {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            default = tiles == _default_tiles(count)  # num_stages None included: Triton's own choice
            found.append(Row(prompt, tiles, default, round(ms, 4), round(used / ms / 1e9, 3)))
        found.sort(key=lambda r: r.ms_per_layer)
        rows += found
        print(f"\n{prompt}: {count} rows, {used / 1e6:.0f} MB of used experts per layer")
        for r in found[:8] + [r for r in found[8:] if r.default]:
            print(f"  {'*' if r.default else ' '} {json.dumps(r.tiles):70} {r.ms_per_layer:7.4f} ms "
                  f"{r.tb_per_s:6.3f} TB/s", flush=True)
        _layout(grouped, routes[0][1])
    deltas = _delta_rule(started, args.budget_s)
    if args.out:
        args.out.write_text(json.dumps({"moe": [asdict(r) for r in rows], "delta_rule": [asdict(r) for r in deltas]},
                                       indent=1))


def _delta_rule(started: float, budget_s: float) -> list[DeltaRow]:
    """triton_delta_rule over each prompt's rows at full DeltaNet dims, by (block_v, num_warps)."""
    delta = recipe_module((("triton_deltanet", {}),), "triton_deltanet", "prefill_delta_bench_engine")
    nv, dk, dv = CFG.linear_num_value_heads, CFG.linear_key_head_dim, CFG.linear_value_head_dim
    found: list[DeltaRow] = []
    for prompt, count in ROWS.items():
        q, k = (torch.nn.functional.normalize(torch.randn(count, nv, dk, device=DEVICE), dim=-1) for _ in range(2))
        v = torch.randn(count, nv, dv, device=DEVICE)
        beta, g = torch.rand(count, nv, device=DEVICE), -torch.rand(count, nv, device=DEVICE)
        states = [torch.zeros(nv, dk, dv, device=DEVICE) for _ in range(LAYERS)]
        rows = []
        for block_v, warps in itertools.product((4, 8, 16, 32), (1, 2, 4)):
            if time.monotonic() - started > budget_s:
                print(f"budget spent: later {prompt} delta rule tiles not run")
                break
            delta.BLOCK_V, delta.NUM_WARPS = block_v, warps
            try:
                ms = graph_ms(lambda: [delta.triton_delta_rule(q, k, v, beta, g, s) for s in states], 20)
            except Exception as exc:  # noqa: BLE001
                print(f"  delta rule block_v={block_v} num_warps={warps}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            default = DELTA_DEFAULT["block_v"] == block_v and DELTA_DEFAULT["num_warps"] == warps
            rows.append(DeltaRow(prompt, {"block_v": block_v, "num_warps": warps}, default,
                                 round(ms * 1000 / LAYERS, 2)))
        rows.sort(key=lambda r: r.us_per_layer)
        print(f"\ndelta rule, {prompt}: {count} rows, {nv} value heads of {dk}x{dv}")
        for r in rows:
            print(f"  {'*' if r.default else ' '} {json.dumps(r.tiles):36} {r.us_per_layer:8.2f} us", flush=True)
        found += rows
    return found


def _layout(grouped, experts: torch.Tensor) -> None:
    """The block layout kernel alone (one program): us per launch by warps and chunk width (the transform launches
    16 warps and chunks of 2048, session 23's fastest)."""
    flat = experts.flatten()
    bm = grouped.BLOCK_M
    num_blocks = -(-flat.numel() // bm) + min(CFG.num_experts, flat.numel())
    bins = triton.next_power_of_2(CFG.num_experts)
    cursor = torch.empty(bins, dtype=torch.int32, device=DEVICE)
    slots = torch.empty(num_blocks * bm, dtype=torch.int32, device=DEVICE)
    owners = torch.empty(num_blocks, dtype=torch.int32, device=DEVICE)
    for warps, chunk in itertools.product((4, 8, 16), (1024, 2048, 4096)):
        us = graph_ms(lambda: grouped._layout_kernel[(1,)](flat, cursor, slots, owners, flat.numel(), num_blocks, bins,
                                                            bm, chunk, num_warps=warps), 50)
        print(f"  layout num_warps={warps:2} chunk={chunk:5}: {us * 1000:6.1f} us")


if __name__ == "__main__":
    main()
