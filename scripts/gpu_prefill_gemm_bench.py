"""The prefill's dense projections at the full model's shapes and the seed prompts' row buckets: cuBLAS (torch's
default library, then cuBLASLt) against the split-K Triton GEMM of templates/triton_prefill_gemm, by tiles:

    python3 scripts/gpu_prefill_gemm_bench.py [--out gemm.json] [--budget-s 200]

Session 33's H100 profile of the voice prefill (224-row bucket) put 79 launches of cuBLAS's 64x64-tile kernel at
1.15 ms, 14.6 us each: the 2048-wide out-projections (DeltaNet's 30 and attention's 10 out_proj from 4096 inputs,
the tower's 13 eh_proj and o_proj from 4096 and 13 MLP down from 6144). Their few output tiles leave each SM the
whole depth alone. Each case runs 8 copies of the weights in one CUDA graph (past the 50 MB L2), one call per
copy; it prints us per call, the best tiles, and what the best saves per prefill (times its calls per prefill).
Nothing here decides anything. Needs CUDA.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference_runtime.bench import graph_ms

KERNEL = REPO / "knowledge_base" / "transforms" / "templates" / "triton_prefill_gemm" / "split_k_gemm.py"
DEVICE = torch.device("cuda")
COPIES = 8
BUCKETS = {"hello": 64, "sentences": 160, "voice": 224}  # prefill_row_ladder's buckets of 52, 135, 209 rows


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    n: int
    k: int
    calls: int  # per prefill


SHAPES = [
    Shape("out_proj, eh_proj (DeltaNet 30, attention 10, tower 13 + 13)", 2048, 4096, 66),
    Shape("tower MLP down", 2048, 6144, 13),
    Shape("shared expert down", 2048, 512, 40),
    Shape("MoE front: router | shared gate, up | expert gate", 1288, 2048, 40),
]
# (block_m, block_n, block_k, num_warps); each with every split and stage count below
TILES = [(64, 64, 64, 4), (64, 128, 64, 4), (128, 128, 64, 8), (64, 64, 128, 4), (64, 128, 128, 8)]
SPLITS = (1, 2, 4, 8)
STAGES = (3, 4)


@dataclass(frozen=True, slots=True)
class Row:
    shape: str
    prompt: str
    rows: int
    kernel: str  # "default" (torch picks the library: cuBLAS here), "cublaslt" or "triton"
    tiles: dict[str, int] | None
    us: float


def _kernel_module():
    spec = importlib.util.spec_from_file_location("split_k_gemm", KERNEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(step) -> float:
    return graph_ms(step, 20) * 1000 / COPIES


def _library(library: str, x: torch.Tensor, weights: list[torch.Tensor]) -> float:
    torch.backends.cuda.preferred_blas_library(library)
    try:
        return _timed(lambda: [F.linear(x, w) for w in weights])
    finally:
        torch.backends.cuda.preferred_blas_library("default")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="JSON results path")
    parser.add_argument("--budget-s", type=float, default=200.0, help="start no new case after this many seconds")
    args = parser.parse_args()
    started = time.monotonic()
    gemm = _kernel_module()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}; {COPIES} weight "
          "copies per graph", flush=True)
    rows: list[Row] = []
    saved = {prompt: 0.0 for prompt in BUCKETS}
    for shape in SHAPES:
        weights = [torch.randn(shape.n, shape.k, device=DEVICE, dtype=torch.bfloat16) * shape.k ** -0.5
                   for _ in range(COPIES)]
        for prompt, m in BUCKETS.items():
            if time.monotonic() - started > args.budget_s:
                print(f"budget spent: {shape.name} at {prompt}'s rows and later cases not run")
                break
            x = torch.randn(m, shape.k, device=DEVICE, dtype=torch.bfloat16)
            expected = F.linear(x.float(), weights[0].float())
            found = [Row(shape.name, prompt, m, lib, None, round(_library(lib, x, weights), 2))
                     for lib in ("default", "cublaslt")]
            for (bm, bn, bk, warps), split, stages in itertools.product(TILES, SPLITS, STAGES):
                if not gemm.fits(weights[0], split, bk):
                    continue
                tiles = {"split": split, "block_m": bm, "block_n": bn, "block_k": bk, "num_warps": warps,
                         "num_stages": stages}
                try:
                    error = (gemm.split_k_linear(x, weights[0], **tiles).float() - expected).abs().max().item()
                    us = _timed(lambda: [gemm.split_k_linear(x, w, **tiles) for w in weights])
                # a tile the compiler or ptxas refuses (registers, shared memory): reported, skipped
                except Exception as exc:  # noqa: BLE001
                    print(f"  {tiles}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                if error > 0.05 * expected.abs().max().item():
                    print(f"  {tiles}: WRONG, max error {error:.3g}")
                    continue
                found.append(Row(shape.name, prompt, m, "triton", tiles, round(us, 2)))
            rows += found
            library = min(r.us for r in found if r.tiles is None)
            best = min((r for r in found if r.tiles is not None), key=lambda r: r.us, default=None)
            line = f"{shape.name} [{shape.n}x{shape.k}], {prompt} ({m} rows): cuBLAS {found[0].us:.2f} us, " \
                   f"cuBLASLt {found[1].us:.2f}"
            if best is not None:
                gain = (library - best.us) * shape.calls / 1000
                saved[prompt] += max(gain, 0.0)
                line += f"; Triton best {best.us:.2f} {json.dumps(best.tiles)}: {gain:+.3f} ms per prefill"
            print(line, flush=True)
    print("what the best Triton tiles save per prefill where they win: " +
          ", ".join(f"{p} {ms:.3f} ms" for p, ms in saved.items()))
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
