"""An A/A calibration kept in a file between one-off evaluations (`python -m evaluator`, `swarm eval`): measured
once per baseline, target and machine, since no speedup is a win without that noise floor."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from targets.schema import Target

from .evaluate import calibrate_noise
from .statistics import NoiseCalibration


class CalibrationFileError(ValueError):
    """The kept calibration cannot serve this evaluation; the message names the fix."""


def kept_or_measured(path: Path | None, baseline_dir: Path, target: Target, *, work_dir: Path,
                     gpu_index: int | None = None, say: Callable[[str], None] = print) -> NoiseCalibration:
    """The calibration in `path` if it exists (it must be of `baseline_dir`), else a new A/A measurement, written
    to `path` when one is given."""
    if path is not None and path.exists():
        try:
            calibration = NoiseCalibration.model_validate_json(path.read_text())
        except ValidationError as e:
            raise CalibrationFileError(f"{path} is not an A/A calibration ({e.error_count()} errors); delete it to "
                                       "measure a new one") from e
        if calibration.baseline != str(baseline_dir):
            raise CalibrationFileError(f"{path} was measured on the baseline {calibration.baseline}, not "
                                       f"{baseline_dir}: pass that baseline or another calibration file")
        say(f"A/A calibration from {path}: {_figures(calibration)}")
        return calibration
    say(f"A/A calibration: {baseline_dir} against itself ...")
    calibration = calibrate_noise(baseline_dir, target, work_dir=work_dir, gpu_index=gpu_index)
    say(f"A/A: {_figures(calibration)}" + (f", kept in {path}" if path is not None else ""))
    if path is not None:
        path.write_text(calibration.model_dump_json(indent=2))
    return calibration


def _figures(c: NoiseCalibration) -> str:
    return f"{c.speedup:.3f}x (CI {c.ci_low:.3f}-{c.ci_high:.3f}, {c.pairs} pairs)"
