"""The prefill's delta rule at the full model's Gated DeltaNet dims, on the GPU: the kept engine's kernel against
today's triton_deltanet template, side by side in one process:

    SWARM_HOME=<state> python3 scripts/gpu_delta_rule_bench.py [--kept best] [--out delta_rule.json]

One call per DeltaNet layer, as the graph-captured prefill makes it: a row bucket (64 for hello's 52 rows, 256
for the sentences' 137 and the voice prompt's 209) whose first `valid` rows advance the state. Each (kernel,
tiles, valid) is a CUDA graph of the frame's 30 layer calls, replayed; the table gives us per call, fastest
first, and the ratio to the kept kernel at its own tiles. Nothing here decides anything: the swarm's renewal of
triton_deltanet does, against the whole engine. Needs CUDA.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from knowledge_base.transforms.triton_deltanet import triton_deltanet
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from scripts.gpu_fast_check import import_package, kept_engine, package_root, recipe_module

DEVICE = torch.device("cuda")
CFG = get_config("drama3").backbone
LAYERS = CFG.num_layers - CFG.num_layers // CFG.full_attention_interval
PROMPTS = {"hello": (64, 52), "sentences": (256, 137), "voice": (256, 209)}  # (row bucket, valid rows)


@dataclass(frozen=True, slots=True)
class Row:
    kernel: str  # "kept" or "today"
    block_v: int
    num_warps: int
    prompt: str
    us_per_call: float


def _inputs(rows: int) -> tuple[torch.Tensor, ...]:
    """delta_rule's inputs as the layer makes them (unit-norm k, q scaled by dk^-0.5), and a start state."""
    nv, dk, dv = CFG.linear_num_value_heads, CFG.linear_key_head_dim, CFG.linear_value_head_dim
    gen = torch.Generator(device=DEVICE).manual_seed(rows)
    q = F.normalize(torch.randn(rows, nv, dk, generator=gen, device=DEVICE), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(rows, nv, dk, generator=gen, device=DEVICE), dim=-1)
    v = torch.randn(rows, nv, dv, generator=gen, device=DEVICE)
    beta, g = torch.rand(rows, nv, generator=gen, device=DEVICE), -torch.rand(rows, nv, generator=gen, device=DEVICE)
    return q, k, v, beta, g, torch.zeros(nv, dk, dv, device=DEVICE)


def _time(kernels, prompt: str) -> float:
    bucket, valid = PROMPTS[prompt]
    q, k, v, beta, g, state = _inputs(bucket)
    length = torch.tensor([valid], device=DEVICE)
    ms = graph_ms(lambda: [kernels.triton_delta_rule(q, k, v, beta, g, state, length) for _ in range(LAYERS)], 50)
    return round(ms * 1000 / LAYERS, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kept", default="best", help="the kept engine whose kernel is the baseline (id or best)")
    parser.add_argument("--out", type=Path, help="JSON results path")
    args = parser.parse_args()
    title, files = kept_engine(args.kept, "drama3")
    kept = importlib.import_module(f"{import_package(files, package_root('delta_kept_'), 'delta_kept').__name__}"
                                   ".triton_deltanet")
    today = recipe_module((("triton_deltanet", {}),), "triton_deltanet", "delta_today")
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; {LAYERS} layer "
          f"calls per graph; kept: {title[:100]}", flush=True)
    rows = [Row("kept", kept.BLOCK_V, kept.NUM_WARPS, p, _time(kept, p)) for p in PROMPTS]
    space = triton_deltanet.space
    for block_v in space["block_v"]:
        for warps in space["num_warps"]:
            today.BLOCK_V, today.NUM_WARPS = block_v, warps
            rows += [Row("today", block_v, warps, p, _time(today, p)) for p in PROMPTS]
    base = {r.prompt: r.us_per_call for r in rows if r.kernel == "kept"}
    print(f"\n{'kernel':6} {'block_v':>7} {'warps':>5} " + " ".join(f"{p + ' us':>14}" for p in PROMPTS))
    for kernel, block_v, warps in sorted({(r.kernel, r.block_v, r.num_warps) for r in rows},
                                         key=lambda key: next(r.us_per_call for r in rows if (r.kernel, r.block_v,
                                                              r.num_warps) == key and r.prompt == "voice")):
        cells = [next(r for r in rows if (r.kernel, r.block_v, r.num_warps, r.prompt) == (kernel, block_v, warps, p))
                 for p in PROMPTS]
        print(f"{kernel:6} {block_v:7d} {warps:5d} " + " ".join(
            f"{c.us_per_call:7.1f} ({base[c.prompt] / c.us_per_call:4.2f}x)" for c in cells))
    if args.out:
        args.out.write_text(json.dumps({"kept": title, "rows": [asdict(r) for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
