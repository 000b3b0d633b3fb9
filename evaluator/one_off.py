"""One-off evaluations (`swarm eval`, `python -m evaluator`): no speedup is a win without the baseline's A/A noise
floor, and measuring it costs a second benchmark, so it is measured only when the candidate would win (and kept in
a file, if given, for the next candidate judged on the same baseline, target and machine)."""
from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from targets.schema import Target

from .evaluate import calibrate_noise, evaluate, with_calibration
from .statistics import NoiseCalibration
from .verdict import Verdict
from .version import benchmark_protocol


class CalibrationFileError(ValueError):
    """The kept calibration cannot serve this evaluation; the message names the fix."""


class KeptCalibration(BaseModel):
    """An A/A calibration with what it is valid for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    baseline: str  # resolved path of the baseline engine package
    machine: str  # host name
    gpu: int | None
    calibration: NoiseCalibration


def evaluate_one_off(candidate_dir: Path, target: Target, *, baseline_dir: Path, work_dir: Path,
                     gpu_index: int | None = None, keep: Path | None = None,
                     say: Callable[[str], None] = print) -> Verdict:
    """evaluate(), with the A/A calibration kept in `keep` if it is there, else measured after a would-be win."""
    scope = {"target": target.name, "baseline": str(Path(baseline_dir).resolve()), "machine": platform.node(),
             "gpu": gpu_index}  # what a kept calibration must match
    if keep is not None and not keep.parent.is_dir():
        raise CalibrationFileError(f"{keep}: its folder does not exist; create it or name another file")
    kept = _load(keep, scope, benchmark_protocol(target)) if keep is not None and keep.exists() else None
    if kept is not None:
        say(f"A/A calibration from {keep}: {_figures(kept)}")
    verdict = evaluate(candidate_dir, target, baseline_dir=baseline_dir, work_dir=work_dir, gpu_index=gpu_index,
                       calibration=kept)
    if verdict.comparison is None or not verdict.comparison.awaits_calibration:
        return verdict
    say(f"a would-be win ({verdict.comparison.speedup:.3f}x): measuring the baseline against itself (A/A) ...")
    calibration = calibrate_noise(baseline_dir, target, work_dir=work_dir, gpu_index=gpu_index)
    say(f"A/A: {_figures(calibration)}" + (f", kept in {keep}" if keep is not None else ""))
    if keep is not None:
        keep.write_text(KeptCalibration(**scope, calibration=calibration).model_dump_json(indent=2))
    return with_calibration(verdict, calibration, target)


def _load(path: Path, scope: dict[str, str | int | None], protocol: str) -> NoiseCalibration:
    try:
        kept = KeptCalibration.model_validate_json(path.read_text())
    except ValidationError as e:
        raise CalibrationFileError(f"{path} is not a kept A/A calibration ({e.error_count()} errors); delete it to "
                                   "measure a new one") from e
    if (why := kept.calibration.unusable_for(protocol)) is not None:
        raise CalibrationFileError(f"{path} {why}: delete it to measure a new one")
    for field, wanted in scope.items():
        if getattr(kept, field) != wanted:
            raise CalibrationFileError(f"{path} was measured for {field} {getattr(kept, field)!r}, this evaluation "
                                       f"is for {wanted!r}: name another calibration file")
    return kept.calibration


def _figures(c: NoiseCalibration) -> str:
    return f"{c.speedup:.3f}x (CI {c.ci_low:.3f}-{c.ci_high:.3f}, {c.pairs} pairs)"
