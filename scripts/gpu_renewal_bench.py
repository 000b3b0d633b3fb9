"""Kernels whose templates changed since the kept engine was built, on the GPU: the kept engine's kernel against
today's template, side by side in one process, at the full model's shapes:

    SWARM_HOME=<state> python3 scripts/gpu_renewal_bench.py [--kept best] [--out renewal.json]

- delta rule (triton_deltanet): one call per DeltaNet layer as the graph-captured prefill makes it, a row bucket
  (64 for hello's 52 rows, 256 for the sentences' 137 and the voice prompt's 209) whose first `valid` rows
  advance the state; a CUDA graph of the 30 layer calls, us per call; today's kernel at every tile of the
  transform's space.
- draws (triton_sampling): one frame's draws, the main token's (4097 logits) and nine codes' (1024 valid of 4096),
  with the default sampling parameters (top-k 30 and top-p 0.9 for the codes); a CUDA graph of one frame, us
  per frame.

The table gives the ratio to the kept kernel at its own tiles. Nothing here decides anything: the swarm's renewals
of the transforms do, against whole engines. Needs CUDA.
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
from reference_runtime.api import SamplingParams
from reference_runtime.bench import graph_ms
from reference_runtime.config import get_config
from scripts.gpu_fast_check import import_package, kept_engine, package_root, recipe_module

DEVICE = torch.device("cuda")
CONFIG = get_config("drama3")
CFG = CONFIG.backbone
LAYERS = CFG.num_layers - CFG.num_layers // CFG.full_attention_interval
PROMPTS = {"hello": (64, 52), "sentences": (256, 137), "voice": (256, 209)}  # (row bucket, valid rows)


@dataclass(frozen=True, slots=True)
class Row:
    kernel: str  # "delta rule" or "draws"
    source: str  # "kept" or "today"
    tiles: str
    case: str  # a prompt, or "frame"
    us: float  # per layer call (delta rule) or per frame (draws)


def _delta_inputs(rows: int) -> tuple[torch.Tensor, ...]:
    """delta_rule's inputs as the layer makes them (unit-norm k, q scaled by dk^-0.5), and a start state."""
    nv, dk, dv = CFG.linear_num_value_heads, CFG.linear_key_head_dim, CFG.linear_value_head_dim
    gen = torch.Generator(device=DEVICE).manual_seed(rows)
    q = F.normalize(torch.randn(rows, nv, dk, generator=gen, device=DEVICE), dim=-1) * dk ** -0.5
    k = F.normalize(torch.randn(rows, nv, dk, generator=gen, device=DEVICE), dim=-1)
    v = torch.randn(rows, nv, dv, generator=gen, device=DEVICE)
    beta, g = torch.rand(rows, nv, generator=gen, device=DEVICE), -torch.rand(rows, nv, generator=gen, device=DEVICE)
    return q, k, v, beta, g, torch.zeros(nv, dk, dv, device=DEVICE)


def _delta_rows(source: str, kernels, tiles: str) -> list[Row]:
    rows = []
    for prompt, (bucket, valid) in PROMPTS.items():
        q, k, v, beta, g, state = _delta_inputs(bucket)
        length = torch.tensor([valid], device=DEVICE)
        ms = graph_ms(lambda: [kernels.triton_delta_rule(q, k, v, beta, g, state, length) for _ in range(LAYERS)],
                      50)
        rows.append(Row("delta rule", source, tiles, prompt, round(ms * 1000 / LAYERS, 2)))
    return rows


def _draws_row(source: str, kernels) -> Row:
    """One frame's draws: the main token and nine codes, each on its own logits and noise slot."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    params, codes = SamplingParams(), CONFIG.num_codebooks - 1
    main = torch.randn(1 + CONFIG.codebook_size, generator=gen, device=DEVICE) * 2
    heads = torch.randn(codes, CONFIG.tower.head_size, generator=gen, device=DEVICE) * 2
    noise = torch.tensor([[12345, 67, slot * 8192] for slot in range(2 + codes)], device=DEVICE)
    recent = torch.full((params.ras_window,), -1, dtype=torch.long, device=DEVICE)
    valid = CONFIG.codec.residual_codebook_size

    def frame() -> None:
        kernels.triton_draw_main(main, params, recent, noise, 0, 1)
        for c in range(codes):
            kernels.triton_draw_code(heads[c], params, valid, noise[2 + c])

    return Row("draws", source, f"main_warps={kernels.MAIN_WARPS}, code_warps={kernels.CODE_WARPS}", "frame",
               round(graph_ms(frame, 200) * 1000, 2))


def _print(rows: list[Row]) -> None:
    base = {(r.kernel, r.case): r.us for r in rows if r.source == "kept"}
    print(f"\n{'kernel':10} {'source':6} {'tiles':34} {'case':10} {'us':>9} {'vs kept':>8}")
    for r in sorted(rows, key=lambda r: (r.kernel, r.case, r.us)):
        print(f"{r.kernel:10} {r.source:6} {r.tiles:34} {r.case:10} {r.us:9.2f} {base[r.kernel, r.case] / r.us:7.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kept", default="best", help="the kept engine whose kernels are the baseline (id or best)")
    parser.add_argument("--out", type=Path, help="JSON results path")
    args = parser.parse_args()
    title, files = kept_engine(args.kept, CONFIG.name)
    kept = import_package(files, package_root("renewal_kept_"), "renewal_kept").__name__
    kept_delta, kept_draws = (importlib.import_module(f"{kept}.{m}") for m in ("triton_deltanet", "triton_sampling"))
    delta = recipe_module((("triton_deltanet", {}),), "triton_deltanet", "renewal_delta")
    draws = recipe_module((("cuda_graph_frame", {}), ("triton_sampling", {})), "triton_sampling", "renewal_draws")
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; kept: "
          f"{title[:100]}", flush=True)
    rows = _delta_rows("kept", kept_delta, f"block_v={kept_delta.BLOCK_V}, num_warps={kept_delta.NUM_WARPS}")
    for block_v in triton_deltanet.space["block_v"]:
        for warps in triton_deltanet.space["num_warps"]:
            delta.BLOCK_V, delta.NUM_WARPS = block_v, warps
            rows += _delta_rows("today", delta, f"block_v={block_v}, num_warps={warps}")
    rows += [_draws_row("kept", kept_draws), _draws_row("today", draws)]
    _print(rows)
    if args.out:
        args.out.write_text(json.dumps({"kept": title, "device": torch.cuda.get_device_name(),
                                        "torch": torch.__version__, "triton": triton.__version__,
                                        "rows": [asdict(r) for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
