"""Each weight-reading decode kernel of the `proven` recipe, and the loops of the prefill's delta rule and of a code
draw, compiled for sm_90 at full drama3 dims on any machine with Triton (no GPU needed): registers and spills
(ptxas -v), the block barriers in each loop's body (per token of the delta rule, per search step of a draw), and
the order of its global loads (L) and block barriers (B) in the PTX, runs of loads counted (L22 = 22 loads in a
row). Triton 3.6 does not move a load across a barrier, so every barrier between two runs of loads is a DRAM
round trip that each program waits out; session 14 (docs/benchmarks.md) found and cut some of them this way. Fewer
barriers in a loop are not faster by themselves: session 20 cut the delta rule's from 14 to 4 per token and the
draws' search steps from 63 to 22, and both ran slower on the GPU (session 21).

    python3 scripts/ptx_order.py [--warps W] [--block-n N] [--only TEXT]

--warps and --block-n replace every kernel's warps and rows per program: what a tile would cost before a GPU
measures it. The last four rows are the prefill's DeltaNet kernels of triton_deltanet_prep and
triton_deltanet_chunks (not yet proven), on top of the recipe.
"""
from __future__ import annotations

import argparse
import importlib
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from triton.runtime.driver import driver

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference_runtime.config import get_config  # noqa: E402
from scripts.gpu_fast_check import RECIPES, import_package, package_root, recipe_files  # noqa: E402
from scripts.sm90_target import Sm90Driver  # noqa: E402

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
BF16, F32, I32, I64, U8 = torch.bfloat16, torch.float32, torch.int32, torch.int64, torch.uint8


@dataclass(frozen=True, slots=True)
class Order:
    kernel: str
    registers: int
    spill_bytes: int
    loop_barriers: str  # barriers in each loop's body, "+"-joined in PTX order; "-" for a kernel without loops
    sequence: str  # L/B/S in PTX order, runs of 4+ loads as L<count>

    @property
    def round_trips(self) -> int:
        """Runs of loads separated by barriers: DRAM round trips in a row."""
        return len([run for run in re.split(r"B+", re.sub(r"S", "", self.sequence)) if run.startswith("L")])


def _ptr(dtype: torch.dtype) -> torch.Tensor:
    """A pointer argument: Triton specializes a launch on a tensor's dtype and 16-byte alignment only."""
    return torch.empty(16, dtype=dtype)


def _sequence(ptx: str) -> str:
    marks = []
    for line in ptx.splitlines():
        line = line.strip()
        if "ld.global" in line:
            marks.append("L")
        elif "bar.sync" in line:
            marks.append("B")
        elif "st.global" in line:
            marks.append("S")
    return re.sub(r"L{4,}", lambda m: f"L{len(m.group(0))}", "".join(marks))


def _loop_barriers(ptx: str) -> str:
    """Barriers between each loop header label and the branch back to it (the body run once per iteration)."""
    lines, counts = ptx.splitlines(), []
    for i, line in enumerate(lines):
        if (header := re.match(r"^(\$L__BB\d+_\d+):.*Loop Header", line)) is not None:
            back = next(j for j in range(i + 1, len(lines)) if re.search(rf"bra(\.uni)?\s+{re.escape(header[1])};",
                                                                          lines[j]))
            counts.append(str(sum("bar.sync" in body for body in lines[i:back])))
    return "+".join(counts) or "-"


def _ptxas(ptx: str) -> tuple[int, int]:
    """(registers, spill store bytes) that ptxas reports for sm_90a."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        report = subprocess.run([str(PTXAS), "-v", "--gpu-name", "sm_90a", f.name, "-o", "/dev/null"],
                                capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Used (\d+) registers", report)[1]), int(re.search(r"(\d+) bytes spill stores", report)[1])


def _kernels(warps: int | None, block_n: int | None) -> dict[str, Callable[[], object]]:
    """kernel name -> its sm_90 warmup at full drama3 dims with the recipe's tiles (or the overrides)."""
    root = package_root("ptx_order_")
    engine = import_package(recipe_files(RECIPES["proven"]), root, "ptx_order_engine")
    tower, fused, block, step, delta, draws = (
        importlib.import_module(f"{engine.__name__}.{m}")
        for m in ("triton_tower", "fused_moe", "moe_block", "triton_deltanet_step", "triton_deltanet", "triton_sampling"))
    prefill_recipe = RECIPES["proven"] + (("triton_deltanet_prep", {}), ("triton_deltanet_chunks", {}))
    prefill = import_package(recipe_files(prefill_recipe), root, "ptx_order_prefill")
    prep, chunks = (importlib.import_module(f"{prefill.__name__}.{m}") for m in ("deltanet_prep", "chunked_delta_rule"))
    b, t = get_config("drama3").backbone, get_config("drama3").tower
    h, e, k, inter, fp8 = b.hidden_size, b.num_experts, b.num_experts_per_tok, b.moe_intermediate_size, b.fp8_block
    nk, nv, dk, dv = b.linear_num_key_heads, b.linear_num_value_heads, b.linear_key_head_dim, b.linear_value_head_dim
    in_proj = 2 * nk * dk + 2 * nv * dv + 2 * nv  # q|k|v|z|b|a
    router = e + 2 * b.shared_expert_intermediate_size + 1
    channels = 2 * nk * dk + nv * dv
    residual = get_config("drama3").codec.residual_codebook_size  # a code draw's valid logits
    code_block = triton.next_power_of_2(residual)
    sub = min(chunks.DIAGONAL, chunks.CHUNK)

    def rows(default: int) -> int:
        return block_n or default

    def run(fn, *args, num_warps: int):
        return lambda: fn.warmup(*args, grid=(1,), num_warps=warps or num_warps)

    return {
        "norm_gemv (DeltaNet in_proj)": run(tower._norm_gemv_kernel, _ptr(BF16), _ptr(F32), _ptr(BF16), _ptr(BF16),
                                            _ptr(BF16), _ptr(BF16), 1e-6, h, in_proj, 0, False,
                                            rows(tower.BLOCK_N), tower.BLOCK_K, num_warps=tower.GEMV_WARPS),
        "norm_gemv swiglu (tower gate|up)": run(tower._norm_gemv_kernel, _ptr(BF16), _ptr(F32), _ptr(BF16),
                                                _ptr(BF16), _ptr(BF16), _ptr(BF16), 1e-6, h, t.intermediate_size, 0,
                                                True, rows(tower.BLOCK_N), tower.BLOCK_K, num_warps=tower.GEMV_WARPS),
        "enter (tower)": run(tower._enter_kernel, _ptr(BF16), _ptr(BF16), _ptr(F32), _ptr(F32), _ptr(BF16),
                             _ptr(BF16), 1e-6, h, rows(tower.BLOCK_N), tower.BLOCK_K, num_warps=tower.NUM_WARPS),
        "residual_gemv (o_proj)": run(tower._residual_gemv_kernel, _ptr(BF16), _ptr(BF16), _ptr(BF16), _ptr(BF16),
                                      _ptr(F32), _ptr(BF16), _ptr(I32), 1e-6, nv * dv, h, False,
                                      rows(tower.RESIDUAL_BLOCK_N), tower.RESIDUAL_BLOCK_K, tower.BLOCK_K,
                                      num_warps=tower.RESIDUAL_WARPS),
        "out (DeltaNet)": run(step._out_kernel, _ptr(BF16), _ptr(BF16), _ptr(F32), _ptr(BF16), _ptr(BF16),
                              _ptr(BF16), _ptr(BF16), _ptr(BF16), 1e-6, nv, dv, channels, b.linear_conv_kernel,
                              triton.next_power_of_2(triton.cdiv(channels, h // rows(step.OUT_BLOCK_N))),
                              rows(step.OUT_BLOCK_N), max(1, step.OUT_BLOCK_K // dv), num_warps=step.OUT_WARPS),
        "norm_proj (MoE block)": run(block._norm_proj_kernel, _ptr(BF16), _ptr(F32), _ptr(BF16), _ptr(BF16),
                                     _ptr(BF16), 1e-6, h, router, rows(block.BLOCK_N), min(h, block.BLOCK_K),
                                     num_warps=block.NUM_WARPS),
        "gate_up (MoE)": run(fused._gate_up_kernel, _ptr(BF16), _ptr(F32), _ptr(U8), _ptr(F32), _ptr(F32), _ptr(I32),
                             e, triton.next_power_of_2(e), k, triton.next_power_of_2(k), h, inter, fp8,
                             min(rows(fused.BLOCK_N), fp8), max(fp8, fused.BLOCK_K), True, num_warps=fused.NUM_WARPS),
        "down (MoE)": run(fused._down_kernel, _ptr(F32), _ptr(I32), _ptr(U8), _ptr(F32), _ptr(BF16), _ptr(BF16),
                          _ptr(BF16), _ptr(BF16), _ptr(BF16), _ptr(BF16), k, triton.next_power_of_2(k), h, inter,
                          b.shared_expert_intermediate_size, fp8, min(rows(fused.DOWN_BLOCK_N), fp8),
                          min(fp8, fused.DOWN_BLOCK_K), fused.DOWN_BLOCK_K, True, True, num_warps=fused.DOWN_WARPS),
        "delta rule (prefill, per token)": run(delta._delta_rule_kernel, _ptr(F32), _ptr(F32), _ptr(F32), _ptr(F32),
                                               _ptr(F32), _ptr(F32), _ptr(F32), _ptr(I64), 64, nv, dk, dv,
                                               math.gcd(delta.BLOCK_V, dv), True, num_warps=delta.NUM_WARPS),
        "draw code (per search step)": run(draws._draw_code_kernel, _ptr(F32), _ptr(I64), _ptr(I64), residual,
                                           1.0, 0.9, 30, False, True, True, True, code_block,
                                           num_warps=draws.CODE_WARPS),
        "delta rule front (prefill)": run(prep._prep_kernel, *[_ptr(BF16)] * 5, in_proj, in_proj, in_proj, in_proj,
                                          in_proj, _ptr(BF16), _ptr(BF16), _ptr(F32), _ptr(BF16), _ptr(I64),
                                          *[_ptr(F32)] * 5, _ptr(BF16), 224, dk ** -0.5, nv, dk, dv, nk * dk, channels,
                                          nv // nk, b.linear_conv_kernel,
                                          triton.next_power_of_2(b.linear_conv_kernel - 1), prep.BLOCK_T, True,
                                          num_warps=prep.NUM_WARPS),
        "delta rule chunk factors": run(chunks._factors_kernel, *[_ptr(F32)] * 9, _ptr(I64), 224, nv, dk, dv,
                                        chunks.CHUNK, sub, (chunks.CHUNK // sub).bit_length() - 1,
                                        min(dk, dv, chunks.KEY_BLOCK), True, chunks.PRECISION,
                                        num_warps=chunks.NUM_WARPS),
        "delta rule chunks (per chunk)": run(chunks._recurrence_kernel, *[_ptr(F32)] * 6, _ptr(I64), 256, nv, dk, dv,
                                             chunks.CHUNK, math.gcd(chunks.BLOCK_V, dv), min(dk, chunks.KEY_BLOCK),
                                             True, chunks.PRECISION, chunks.STAGES, num_warps=chunks.NUM_WARPS),
        "delta rule chunk outputs": run(chunks._output_kernel, *[_ptr(F32)] * 6, _ptr(I64), 224, 256, nv, dk, dv,
                                        chunks.CHUNK, math.gcd(chunks.BLOCK_V, dv), min(dk, chunks.KEY_BLOCK), True,
                                        chunks.PRECISION, num_warps=chunks.NUM_WARPS),
    }


def orders(warps: int | None = None, block_n: int | None = None, only: str = "") -> list[Order]:
    driver.set_active(Sm90Driver())
    found = []
    for name, warmup in _kernels(warps, block_n).items():
        if only not in name:
            continue
        ptx = warmup().asm["ptx"]
        found.append(Order(name, *_ptxas(ptx), _loop_barriers(ptx), _sequence(ptx)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warps", type=int, help="every kernel's warps (default: the recipe's)")
    parser.add_argument("--block-n", type=int, help="every kernel's rows per program (default: the recipe's)")
    parser.add_argument("--only", default="", help="the kernels whose names contain this text")
    args = parser.parse_args()
    print(f"{'kernel':34} {'regs':>5} {'spill B':>8} {'trips':>5} {'loop B':>6}  loads (L) and barriers (B) in "
          "PTX order")
    for o in orders(args.warps, args.block_n, args.only):
        print(f"{o.kernel:34} {o.registers:5d} {o.spill_bytes:8d} {o.round_trips:5d} {o.loop_barriers:>6}  "
              f"{o.sequence}")


if __name__ == "__main__":
    main()
