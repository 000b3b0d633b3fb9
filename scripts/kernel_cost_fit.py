"""Where a graphed frame's kernel time goes, from kernel benches already measured (no GPU needed):

    python3 scripts/kernel_cost_fit.py docs/measurements/2026-12-04_h200_s15_gemv.json \
        docs/measurements/2026-12-04_h200_s15_moe.json [--launches 432 --frame-gb 6.1 --kernel-ms 2.99]

The dense one-row GEMVs only stream their weights, so each family's fastest tile fits us = fixed + MB / bandwidth
by least squares: `fixed` is what a launch costs whatever it reads (the gap between graphed kernels, the ramp up
and the drain, one DRAM round trip). Families with work before their loads (the MoE kernels route, then read)
are shown against that line, not fitted. Given the frame's launch count, bytes and kernel time, the frame splits
into launches x fixed, bytes / bandwidth, and the rest: kernels bound by dependent steps, not by bytes.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# the benches' families that only stream weights (gpu_gemv_bench.py), fitted; the rest are compared to the fit
STREAMING = {"o_proj", "deltanet in_proj", "attention q|k|v", "tower gate|up", "tower down"}


@dataclass(frozen=True)
class Family:
    name: str
    us: float  # the fastest tile, per launch
    mb: float  # bytes read per launch, from the bench's own GB/s

    @classmethod
    def fastest(cls, rows: list[dict]) -> list[Family]:
        best: dict[str, dict] = {}
        for r in rows:
            if r.get("kernel") == "cublas":
                continue  # the reference point of gpu_gemv_bench, not a kernel of the frame
            name = r.get("shape") or r["kernel"]
            if name not in best or r["us"] < best[name]["us"]:
                best[name] = r
        return [cls(n, r["us"], r["us"] * r["gb_per_s"] / 1e3) for n, r in best.items()]


def fit(families: list[Family]) -> tuple[float, float]:
    """(fixed us per launch, bandwidth in TB/s) of the streaming families."""
    mb = np.array([f.mb for f in families if f.name in STREAMING])
    us = np.array([f.us for f in families if f.name in STREAMING])
    if len(mb) < 2:
        raise SystemExit(f"need at least two of {sorted(STREAMING)} in the bench files to fit a line")
    (fixed, per_mb), *_ = np.linalg.lstsq(np.vstack([np.ones_like(mb), mb]).T, us, rcond=None)
    return float(fixed), 1.0 / float(per_mb)  # MB/us = TB/s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benches", type=Path, nargs="+", help="gpu_gemv_bench.py / gpu_moe_bench.py JSON files")
    parser.add_argument("--launches", type=int, help="kernels per decoded frame (a frame profile's count)")
    parser.add_argument("--frame-gb", type=float, help="bytes a frame reads, GB")
    parser.add_argument("--kernel-ms", type=float, help="a frame's kernel time, ms")
    args = parser.parse_args()
    families = Family.fastest([r for path in args.benches for r in json.loads(path.read_text())])
    fixed, tb_per_s = fit(families)
    print(f"fit over {len([f for f in families if f.name in STREAMING])} streaming families: "
          f"{fixed:.2f} us per launch + bytes at {tb_per_s:.2f} TB/s")
    print(f"{'family':<18} {'MB':>7} {'us':>7} {'line us':>8} {'over':>6}")
    for f in sorted(families, key=lambda f: f.mb):
        line = fixed + f.mb / tb_per_s
        print(f"{f.name:<18} {f.mb:>7.2f} {f.us:>7.2f} {line:>8.2f} {f.us - line:>+6.2f}"
              f"{'' if f.name in STREAMING else '  (not fitted)'}")
    if None not in (args.launches, args.frame_gb, args.kernel_ms):
        launches_ms = args.launches * fixed / 1e3
        bytes_ms = args.frame_gb / tb_per_s  # GB / (TB/s) = ms
        print(f"frame: {args.kernel_ms:.2f} ms of kernels = {launches_ms:.2f} ms for {args.launches} launches + "
              f"{bytes_ms:.2f} ms for {args.frame_gb:g} GB + {args.kernel_ms - launches_ms - bytes_ms:.2f} ms "
              "in kernels bound by dependent steps")


if __name__ == "__main__":
    main()
