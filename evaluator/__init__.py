"""Judges a candidate engine against the reference: isolation, correctness cascade, benchmark.

    calibration = calibrate_noise(baseline_dir, target, work_dir=...)   # A/A noise floor: without it no win
    verdict = evaluate(candidate_dir, target, baseline_dir=..., work_dir=..., calibration=calibration)
    python -m evaluator CANDIDATE_DIR --target T.yaml [--calibration aa.json]   # from a shell: one_off.py, which
                                                            # measures the A/A only for a would-be win
    live_workers.stop_all()   # on an interrupt: kill every worker of this process
"""
from . import live_workers
from .evaluate import calibrate_noise, evaluate, with_calibration
from .statistics import NoiseCalibration
from .verdict import EvaluatorError, Status, Verdict
from .version import benchmark_protocol, judge_version

__all__ = ["live_workers", "evaluate", "calibrate_noise", "NoiseCalibration", "EvaluatorError", "Status", "Verdict",
           "benchmark_protocol", "judge_version", "with_calibration"]
