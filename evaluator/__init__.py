"""Judges a candidate engine against the reference: isolation, correctness cascade, benchmark.

    verdict = evaluate(candidate_dir, target, baseline_dir=..., work_dir=...)
    calibration = calibrate_noise(baseline_dir, target, work_dir=...)   # A/A noise floor, pass to evaluate()
"""
from .evaluate import calibrate_noise, evaluate
from .statistics import NoiseCalibration
from .verdict import EvaluatorError, Status, Verdict

__all__ = ["evaluate", "calibrate_noise", "NoiseCalibration", "EvaluatorError", "Status", "Verdict"]
