"""Tiles of triton_moe_fused's two kernels at the full model's MoE shapes, on the GPU:

    python3 scripts/gpu_moe_bench.py [--out moe.json] [--budget-s 240]

Session 8's profile put the MoE kernels at 1.5 of the kept engine's 6.5 ms per frame: 0.93 ms for gate|up and
0.58 ms for down over 40 layers, about a sixth of the bandwidth their expert bytes need. This sweeps each
kernel's tiles (the transform's knobs) in one layer's launch, captured as a CUDA graph of launches whose router
logits pick disjoint sets of 8 of the 256 experts, so every launch reads expert weights no other launch of the
graph read (more bytes than L2 holds, as in the frame), and prints us per launch and the achieved GB/s of the
weights it reads, fastest first, with the transform's default tiles marked. Nothing here decides anything: it
says which tiles to give the defaults. Needs CUDA.
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

from knowledge_base.transforms.triton_moe_fused import triton_moe_fused
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from reference_runtime.fp8 import quantize_blocks
from scripts.gpu_fast_check import recipe_module

DEVICE = torch.device("cuda")
CFG = get_config("drama3").backbone
DEFAULT = next(triton_moe_fused.variants())
# one warp too (session 14, not yet measured): its routing's eight top-k reductions and each chunk's sums become
# warp shuffles with no block barrier (sm_90 PTX), so the expert weight loads of all chunks issue at once
GATE_UP = [{"block_n": bn, "block_k": bk, "num_warps": w}
           for bn, bk, w in itertools.product((2, 4, 8, 16), (512, 1024, 2048), (1, 2, 4, 8))]
DOWN = [{"down_block_n": bn, "down_block_k": bk, "down_warps": w}
        for bn, bk, w in itertools.product((2, 4, 8, 16), (64, 128), (2, 4, 8))]


@dataclass(frozen=True, slots=True)
class Row:
    kernel: str  # "gate_up" or "down"
    tiles: dict[str, int]
    default: bool
    us: float
    gb_per_s: float


@dataclass(frozen=True, slots=True)
class Layer:
    """One MoE layer's weights at full size and, per launch, inputs routing to its own 8 experts."""
    gate_up: torch.Tensor  # (E, 2I, H) uint8 view of the FP8 stack
    gate_up_scale: torch.Tensor
    down: torch.Tensor  # (E, H, I) uint8 view
    down_scale: torch.Tensor
    shared_down: list[torch.Tensor]  # per launch, so that it too comes from memory and not from L2
    x: torch.Tensor
    logits: list[torch.Tensor]  # per launch: router logits whose top 8 are experts 8i..8i+7
    ids: list[torch.Tensor]  # per launch: those expert ids, as the gate|up kernel writes them
    hidden: torch.Tensor  # (k, I) fp32, the down kernel's input
    shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # shared gate, up (I_s,), and its expert gate (1,)


def _layer() -> Layer:
    E, k, h, inter, block = CFG.num_experts, CFG.num_experts_per_tok, CFG.hidden_size, CFG.moe_intermediate_size, \
        CFG.fp8_block
    bf16 = torch.bfloat16
    gate_up, gate_up_scale = quantize_blocks(torch.randn(E, 2 * inter, h, device=DEVICE, dtype=bf16) * h ** -0.5,
                                             block)
    down, down_scale = quantize_blocks(torch.randn(E, h, inter, device=DEVICE, dtype=bf16) * inter ** -0.5, block)
    launches = E // k
    logits = []
    for i in range(launches):
        row = torch.randn(E, device=DEVICE, dtype=bf16)
        row[i * k:(i + 1) * k] += 10
        logits.append(row)
    ids = [torch.arange(i * k, (i + 1) * k, device=DEVICE, dtype=torch.int32) for i in range(launches)]
    shared = CFG.shared_expert_intermediate_size
    return Layer(gate_up.view(torch.uint8), gate_up_scale, down.view(torch.uint8), down_scale,
                 [torch.randn(h, shared, device=DEVICE, dtype=bf16) * shared ** -0.5 for _ in range(launches)],
                 torch.randn(1, h, device=DEVICE, dtype=bf16), logits, ids,
                 torch.randn(k, inter, device=DEVICE), (torch.randn(shared, device=DEVICE, dtype=bf16),
                                                         torch.randn(shared, device=DEVICE, dtype=bf16),
                                                         torch.randn(1, device=DEVICE, dtype=bf16)))


def _launches(fused, layer: Layer, kernel: str, t: dict[str, int]) -> list[Callable[[], None]]:
    """One launch per expert set, with fused_moe_decode's arguments and tiles `t`."""
    E, k, h, inter, block = CFG.num_experts, CFG.num_experts_per_tok, CFG.hidden_size, CFG.moe_intermediate_size, \
        CFG.fp8_block
    kp = triton.next_power_of_2(k)
    if kernel == "gate_up":
        bn, bk = min(t["block_n"], block), max(block, fused._tile(h, t["block_k"]))
        hidden, ids = torch.empty(k, inter, device=DEVICE), torch.empty(k, dtype=torch.int32, device=DEVICE)
        return [lambda logits=logits: fused._gate_up_kernel[(k, inter // bn)](
            layer.x, logits, layer.gate_up, layer.gate_up_scale, hidden, ids, E, triton.next_power_of_2(E), k, kp,
            h, inter, block, bn, bk, True, num_warps=t["num_warps"]) for logits in layer.logits]
    dbn, shared = min(t["down_block_n"], block), CFG.shared_expert_intermediate_size
    out = torch.empty_like(layer.x)
    return [lambda ids=ids, sd=sd: fused._down_kernel[(h // dbn,)](
        layer.hidden, ids, layer.down, layer.down_scale, *layer.shared, sd, layer.x, out, k, kp, h, inter,
        shared, block, dbn, min(block, fused._tile(inter, t["down_block_k"])), fused._tile(shared, t["down_block_k"]),
        True, False, num_warps=t["down_warps"]) for ids, sd in zip(layer.ids, layer.shared_down)]


def _bytes(kernel: str) -> int:
    """Weight bytes one launch reads: k experts' FP8 tiles (and, for down, the bf16 shared expert)."""
    k, h, inter = CFG.num_experts_per_tok, CFG.hidden_size, CFG.moe_intermediate_size
    if kernel == "gate_up":
        return k * 2 * inter * h
    return k * h * inter + h * CFG.shared_expert_intermediate_size * 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new tile after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    fused = recipe_module((("cuda_graph_frame", {}), ("triton_fp8_moe", {}), ("triton_moe_fused", {})), "fused_moe",
                          "moe_bench_engine")
    layer = _layer()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; "
          f"{len(layer.logits)} launches per graph, {CFG.num_layers} MoE layers per frame", flush=True)
    rows: list[Row] = []
    for kernel, space in (("gate_up", GATE_UP), ("down", DOWN)):
        found = []
        for tiles in space:
            if time.monotonic() - started > args.budget_s:
                print(f"budget spent: later {kernel} tiles not run")
                break
            try:
                us = graph_ms(lambda ls=_launches(fused, layer, kernel, tiles): [f() for f in ls], 20) * 1000 \
                    / len(layer.logits)
            # a tile the compiler or ptxas refuses (registers, shared memory): reported, skipped
            except Exception as exc:  # noqa: BLE001
                print(f"  {kernel} {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            default = all(DEFAULT[name] == value for name, value in tiles.items())
            found.append(Row(kernel, tiles, default, round(us, 2), round(_bytes(kernel) / us / 1e3, 1)))
        found.sort(key=lambda r: r.us)
        rows += found
        mark = next((r for r in found if r.default), None)
        print(f"\n{kernel}: {_bytes(kernel) / 1e6:.1f} MB of weights per launch; default tiles "
              f"{mark.us if mark else '-'} us, x{CFG.num_layers} layers = "
              f"{mark.us * CFG.num_layers / 1e3 if mark else float('nan'):.3f} ms per frame")
        for r in found[:8] + [r for r in found[8:] if r.default]:
            print(f"  {'*' if r.default else ' '} {json.dumps(r.tiles):62} {r.us:8.2f} us {r.gb_per_s:8.1f} GB/s")
        if args.out:
            args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
