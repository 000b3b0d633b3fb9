"""Timing statistics and the speed decision: paired frames/s and TTFA ratios, bootstrap CIs, spread, A/A
calibration.

PASS needs the CI's lower bound above the threshold, max(target min_speedup, the A/A band); with an untidy spread
(relative IQR of the paired ratios on some prompt over MAX_REL_IQR) on fewer than RELIABLE_PAIRS pairs the bound
must clear the threshold by that spread too, else NOISY: a few pairs with a wide spread make the bootstrap CI itself
unreliable, while a speedup far beyond the spread is decided either way. A noisy host therefore gets more pairs
(Benchmark.run extends the rounds) rather than a verdict on too few, and so does a borderline one (MorePairs).
SLOWER when the upper bound is under the threshold or the median ratio is <= 1; a ratio above max_plausible_speedup
is sent to manual review as cheat_suspected. Without an A/A calibration a win is NOISY, never PASS: the paired
design cannot see order and process effects, and on a 2-core CPU they alone lifted an exact copy's CI above
min_speedup 1.03. Time to first audio is decided the same way on its own ratios and A/A band: it wins alone while
frames/s is not worse beyond noise (a faster prefill moves a stream's frames/s by a percent), and it vetoes a
frames/s win when it is later beyond noise.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from reference_runtime.bench import Percentiles

from .verdict import Comparison, FirstAudio, PromptFigures, Status

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
    # the same A/A pairs' TTFA ratios; None in calibrations measured before TTFA could decide a win
    ttfa_ci_low: float | None = None
    ttfa_ci_high: float | None = None
    # the benchmark settings it was measured under (version.benchmark_protocol); None: before they were recorded
    protocol: str | None = None

    @property
    def bands_first_audio(self) -> bool:
        return self.ttfa_ci_low is not None and self.ttfa_ci_high is not None

    def unusable_for(self, protocol: str) -> str | None:
        """Why this band cannot judge trials run under `protocol`, or None."""
        if not self.bands_first_audio:
            return "was measured before the A/A band of time to first audio was"
        if self.protocol != protocol:
            return ("was measured under other benchmark settings (trials, prompts or streaming schedule) or before "
                    "they were recorded")
        return None


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


def ttfa_threshold(min_speedup: float, calibration: NoiseCalibration | None) -> float | None:
    """As `threshold`, from the A/A band of TTFA ratios; None when the calibration has none."""
    if calibration is None:
        return min_speedup
    if not calibration.bands_first_audio:
        return None
    return max(min_speedup, calibration.ttfa_ci_high, 1 / calibration.ttfa_ci_low)


@dataclass(frozen=True, slots=True)
class Paired:
    """One figure's paired ratios (candidate over baseline, above 1: better) and their largest per-prompt
    relative IQR."""

    ratios: list[float]
    spread: float


def compare(frames: Paired, first_audio: Paired, ttfa_ratio: float, confidence: float, seed: int, *,
            min_speedup: float, calibration: NoiseCalibration | None) -> Comparison:
    """`ttfa_ratio`: candidate / baseline TTFA over the prompts' medians, for reports."""
    low, high = bootstrap_ci(frames.ratios, confidence, seed)
    t_low, t_high = bootstrap_ci(first_audio.ratios, confidence, seed + 1)
    sooner = FirstAudio(speedup=statistics.median(first_audio.ratios), ci_low=t_low, ci_high=t_high,
                        threshold=ttfa_threshold(min_speedup, calibration), spread=first_audio.spread)
    return Comparison(speedup=statistics.median(frames.ratios), ci_low=low, ci_high=high,
                      threshold=threshold(min_speedup, calibration), ttfa_ratio=ttfa_ratio, spread=frames.spread,
                      pairs=len(frames.ratios), calibrated=calibration is not None, first_audio=sooner)


def calibrated(c: Comparison, min_speedup: float, calibration: NoiseCalibration) -> Comparison:
    """The comparison against an A/A band measured after it (one-off evaluations measure it only for a win)."""
    update: dict = {"threshold": threshold(min_speedup, calibration), "calibrated": True}
    if c.first_audio is not None:
        update["first_audio"] = c.first_audio.model_copy(
            update={"threshold": ttfa_threshold(min_speedup, calibration)})
    return c.model_copy(update=update)


def needs_margin(spread: float, pairs: int) -> bool:
    """Whether the CI is too unreliable to decide alone: a spread over MAX_REL_IQR on too few pairs."""
    return spread > MAX_REL_IQR and pairs < RELIABLE_PAIRS


def straddles(c: Comparison) -> bool:
    """A borderline comparison: a figure's median clears its threshold, its CI holds the threshold."""
    t = c.first_audio
    return c.ci_low <= c.threshold < c.speedup or (
        t is not None and t.threshold is not None and t.ci_low <= t.threshold < t.speedup)


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
    """The status and a one-line reason. Frames/s decides as below. Time to first audio can win alone when
    frames/s is not worse beyond noise, and it vetoes a win when it is worse beyond noise (a TTS user waits
    for the first audio as much as for the rest)."""
    t = c.first_audio
    # of frames/s only: against the eager reference, whose prefill runs the DeltaNet recurrence token by token,
    # an honest graphed engine reaches first audio 100-150x sooner on the H200
    if c.speedup > max_plausible:
        return Status.CHEAT_SUSPECTED, f"{_ci(c)} is above max_plausible_speedup {max_plausible:g}: manual review"
    if t is not None and t.later:
        return Status.SLOWER, f"time to first audio later beyond noise: {t.describe()}; frames/s {_ci(c)}"
    status, reason = _decide_one("", c.speedup, c.ci_low, c.ci_high, c.threshold, c.spread, c.pairs, c.calibrated)
    if status is not Status.SLOWER or t is None or t.threshold is None or c.ci_high < 1 / c.threshold:
        return status, reason + _first_audio(c)
    sooner, why = _decide_one("to first audio", t.speedup, t.ci_low, t.ci_high, t.threshold, t.spread, c.pairs,
                              c.calibrated)
    if sooner is Status.SLOWER:
        return status, reason + _first_audio(c)
    return sooner, f"{why}; frames/s not worse beyond noise: {_ci(c)}"


def _ci(c: Comparison) -> str:
    return f"speedup {c.speedup:.3f} (CI {c.ci_low:.3f}..{c.ci_high:.3f}, threshold {c.threshold:.3f})"


def _first_audio(c: Comparison) -> str:
    return "" if c.first_audio is None else f"; {c.first_audio.describe()}"


def _decide_one(figure: str, speedup: float, ci_low: float, ci_high: float, threshold: float, spread: float,
                pairs: int, calibrated: bool) -> tuple[Status, str]:
    """One figure's paired ratios against its threshold: PASS, NOISY or SLOWER, with the reason."""
    name = f"speedup {figure}".rstrip()
    ci = f"{name} {speedup:.3f} (CI {ci_low:.3f}..{ci_high:.3f}, threshold {threshold:.3f})"
    faster = f"faster {figure}".rstrip()
    if ci_high < threshold or speedup <= 1:
        return Status.SLOWER, f"not {faster}: {ci}"
    if needs_margin(spread, pairs) and ci_low <= threshold * (1 + spread):
        return Status.NOISY, (f"timing spread {spread:.0%} (relative IQR) is over {MAX_REL_IQR:.0%} on {pairs} "
                              f"pairs (under {RELIABLE_PAIRS}) and the CI's lower bound does not clear the threshold "
                              f"by as much: {ci}")
    if not calibrated and ci_low > threshold:
        return Status.NOISY, (f"no A/A calibration, so a win cannot be told from order and process effects: {ci}; "
                              "pass calibration=calibrate_noise(...), or use `swarm eval` / `python -m evaluator`, "
                              "which measure it for a win")
    if ci_low > threshold:
        if spread <= MAX_REL_IQR:
            return Status.PASS, f"{faster}: {ci}"
        margin = f"{pairs} pairs at a {spread:.0%} spread"
        if needs_margin(spread, pairs):
            margin = f"beyond a {spread:.0%} spread"
        return Status.PASS, f"{faster}: {ci} ({margin})"
    return Status.SLOWER, f"not {faster} beyond noise: {ci}"
