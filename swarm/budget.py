"""A run's spend so far and the budget check that stops it: iterations, wall minutes, GPU hours, dollars."""
from __future__ import annotations

from dataclasses import dataclass

from targets.schema import BudgetSpec


@dataclass(frozen=True, slots=True)
class Spend:
    iterations: int  # iterations started
    wall_s: float  # over every session of the run
    device_s: float  # summed candidate evaluation seconds (on the target's device: GPUs, or the CPU)
    dollars: float  # agents' ledger

    @property
    def gpu_hours(self) -> float:
        return self.device_s / 3600

    @property
    def wall_minutes(self) -> float:
        return self.wall_s / 60


# Each budget's stop reason starts with its phrase; the `swarm run` option that raises it, for the summary.
ITERATIONS, WALL, GPU_HOURS, DOLLARS = "iteration budget", "wall-clock budget", "GPU-hour budget", "dollar budget"
RAISE_OPTIONS = {ITERATIONS: "--iterations", WALL: "--wall-minutes", GPU_HOURS: "--gpu-hours", DOLLARS: "--dollars"}


def exhausted(budget: BudgetSpec, spend: Spend, *, mid_iteration: bool = False) -> str:
    """Why the run must not start another iteration (or, `mid_iteration`, another evaluation); "" while budget
    remains."""
    if not mid_iteration and spend.iterations >= budget.iterations:
        return f"{ITERATIONS} spent ({spend.iterations}/{budget.iterations})"
    if spend.wall_minutes >= budget.wall_minutes:
        return f"{WALL} spent ({spend.wall_minutes:.1f}/{budget.wall_minutes:g} min)"
    if budget.gpu_hours is not None and spend.gpu_hours >= budget.gpu_hours:
        return f"{GPU_HOURS} spent ({spend.gpu_hours:.2f}/{budget.gpu_hours:g} h)"
    if budget.dollars is not None and spend.dollars >= budget.dollars:
        return f"{DOLLARS} spent (${spend.dollars:.2f}/${budget.dollars:g})"
    return ""


def raise_option(stop_reason: str) -> str | None:
    """The `swarm run` option that lifts the budget a run stopped on; None if it stopped for another reason."""
    return next((option for phrase, option in RAISE_OPTIONS.items() if stop_reason.startswith(phrase)), None)
