"""Timing statistics and the speed decision: paired frames/s ratios, a bootstrap CI, spread, A/A calibration.

PASS needs the CI's lower bound above the threshold, max(target min_speedup, the A/A band); with an untidy spread
(relative IQR of the paired ratios on some prompt over MAX_REL_IQR) on fewer than RELIABLE_PAIRS pairs the bound
must clear the threshold by that spread too, else NOISY: a few pairs with a wide spread make the bootstrap CI itself
unreliable, while a speedup far beyond the spread is decided either way. A noisy host therefore gets more pairs
(Benchmark.run extends the rounds) rather than a verdict on too few, and so does a borderline one (MorePairs). SLOWER when the upper bound is under the
threshold or the median ratio is <= 1; a ratio above max_plausible_speedup is sent to manual review as
cheat_suspected. Without an A/A calibration a win is NOISY, never PASS: the paired design cannot see order and
process effects, and on a 2-core CPU they alone lifted an exact copy's CI above min_speedup 1.03.
"""
from __future__ import annotations

import statistics

import numpy as np
from pydantic import BaseModel, ConfigDict

from reference_runtime.bench import Percentiles

from .verdict import Comparison, PromptFigures, Status

MAX_REL_IQR = 0.10
# From this many pairs the percentile bootstrap of the median covers about as it should whatever the spread, so the
# CI decides alone: identical engines with ratios spread +-40% cleared a 1.03 bar in 1.0% of 400 seeded runs of 30
# pairs, and in 2.3% with 12 (its CI moves in steps of whole order statistics).
RELIABLE_PAIRS = 30
BOOTSTRAP_RESAMPLES = 2000


class NoiseCalibration(BaseModel):
    """Baseline against itself (A/A), measured with the benchmark protocol: the speedup noise floor."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    speedup: float  # median paired ratio (ideally 1)
    ci_low: float
    ci_high: float
    rel_iqr: float
    pairs: int
    baseline: str


def rel_iqr(values: list[float]) -> float:
    q1, q3 = np.percentile(values, [25, 75])
    return float((q3 - q1) / np.median(values))


def bootstrap_ci(ratios: list[float], confidence: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of the median of paired ratios."""
    data = np.asarray(ratios)
    rng = np.random.default_rng(seed)
    medians = np.median(data[rng.integers(0, len(data), (BOOTSTRAP_RESAMPLES, len(data)))], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def prompt_figures(prompt: str, ttfa_ms: list[float], fps: list[float], rtf: list[float]) -> PromptFigures:
    t, f, r = Percentiles.of(ttfa_ms), Percentiles.of(fps), Percentiles.of(rtf)
    return PromptFigures(prompt=prompt, trials=len(fps), ttfa_ms_p50=t.p50, ttfa_ms_p95=t.p95,
                         frames_per_s_p50=f.p50, frames_per_s_p95=f.p95, rtf_p50=r.p50, rtf_p95=r.p95)


def threshold(min_speedup: float, calibration: NoiseCalibration | None) -> float:
    """The A/A band is symmetric: identical engines measured 0.80x (CI 0.77-0.88) on the H200 (order and
    process effects), so a candidate must clear 1/0.77 as well as the upper bound, not only the latter."""
    if calibration is None:
        return min_speedup  # decide() will not call a win on an uncalibrated comparison
    return max(min_speedup, calibration.ci_high, 1 / calibration.ci_low)


def compare(ratios: list[float], ttfa_ratio: float, spread: float, confidence: float, seed: int, *,
            min_speedup: float, calibration: NoiseCalibration | None) -> Comparison:
    """`spread`: the largest relative IQR of the paired ratios seen (per prompt)."""
    low, high = bootstrap_ci(ratios, confidence, seed)
    return Comparison(speedup=statistics.median(ratios), ci_low=low, ci_high=high,
                      threshold=threshold(min_speedup, calibration), ttfa_ratio=ttfa_ratio, spread=spread,
                      pairs=len(ratios), calibrated=calibration is not None)


def calibrated(c: Comparison, min_speedup: float, calibration: NoiseCalibration) -> Comparison:
    """The comparison against an A/A band measured after it (one-off evaluations measure it only for a win)."""
    return c.model_copy(update={"threshold": threshold(min_speedup, calibration), "calibrated": True})


def needs_margin(spread: float, pairs: int) -> bool:
    """Whether the CI is too unreliable to decide alone: a spread over MAX_REL_IQR on too few pairs."""
    return spread > MAX_REL_IQR and pairs < RELIABLE_PAIRS


def straddles(c: Comparison) -> bool:
    """A borderline comparison: its median clears the threshold, its CI holds the threshold."""
    return c.ci_low <= c.threshold < c.speedup


class MorePairs:
    """Whether the benchmark measures another round past the planned ones: while a wide spread leaves the verdict
    NOISY; and, when the verdict on the planned rounds is borderline (`straddles`), every round up to the cap with
    no look in between. The borderline verdict then rests on two looks, the planned pairs and all of them: a
    decision at whichever round first looks lucky would inflate false wins (optional stopping)."""

    def __init__(self) -> None:
        self.borderline: bool | None = None  # decided at the first look

    def __call__(self, c: Comparison, status: Status) -> bool:
        if self.borderline is None:
            self.borderline = straddles(c)
        return self.borderline or (status is Status.NOISY and needs_margin(c.spread, c.pairs))


def decide(c: Comparison, max_plausible: float) -> tuple[Status, str]:
    """The status and a one-line reason."""
    spread = c.spread
    ci = f"speedup {c.speedup:.3f} (CI {c.ci_low:.3f}..{c.ci_high:.3f}, threshold {c.threshold:.3f})"
    if c.speedup > max_plausible:
        return Status.CHEAT_SUSPECTED, f"{ci} is above max_plausible_speedup {max_plausible:g}: manual review"
    if c.ci_high < c.threshold or c.speedup <= 1:
        return Status.SLOWER, f"not faster: {ci}"
    if needs_margin(spread, c.pairs) and c.ci_low <= c.threshold * (1 + spread):
        return Status.NOISY, (f"timing spread {spread:.0%} (relative IQR) is over {MAX_REL_IQR:.0%} on {c.pairs} "
                              f"pairs (under {RELIABLE_PAIRS}) and the CI's lower bound does not clear the threshold "
                              f"by as much: {ci}")
    if c.awaits_calibration:
        return Status.NOISY, (f"no A/A calibration, so a win cannot be told from order and process effects: {ci}; "
                              "pass calibration=calibrate_noise(...), or use `swarm eval` / `python -m evaluator`, "
                              "which measure it for a win")
    if c.ci_low > c.threshold:
        if spread <= MAX_REL_IQR:
            return Status.PASS, f"faster: {ci}"
        margin = f"{c.pairs} pairs at a {spread:.0%} spread"
        if needs_margin(spread, c.pairs):
            margin = f"beyond a {spread:.0%} spread"
        return Status.PASS, f"faster: {ci} ({margin})"
    return Status.SLOWER, f"not faster beyond noise: {ci}"
