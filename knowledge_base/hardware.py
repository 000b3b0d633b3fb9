"""What a graphed kernel launch costs on a GPU kind, measured: a line through the dense one-row GEMVs' bench
figures (scripts/gpu_gemv_bench.py, then scripts/kernel_cost_fit.py). Agents see it next to the parent's
profile, so a frame's kernel count reads as time. Add a kind by running those two scripts on it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LaunchCost:
    fixed_us: float  # per launch whatever it reads: the gap between graphed kernels, the ramp up, the drain
    stream_tb_per_s: float  # the weights' streaming rate past that
    measured: str  # when, and from which raw files

    def describe(self, gpu: str, launches: float, kernel_ms: float) -> str:
        fixed_ms = launches * self.fixed_us / 1e3
        return (f"On {gpu}, a graphed launch costs ~{self.fixed_us:g} us whatever it reads, and weights stream at "
                f"~{self.stream_tb_per_s:g} TB/s beyond that ({self.measured}): the parent's {launches:.0f} "
                f"launches per frame are ~{fixed_ms:.2f} ms of its {kernel_ms:.2f} ms of kernels, time that only "
                "fewer launches (fused ops) win back.")


LAUNCH_COSTS: dict[str, LaunchCost] = {
    "h200": LaunchCost(2.06, 4.05, "measured 2026-12-04: docs/measurements/2026-12-04_h200_s15_{gemv,moe}.json"),
}
