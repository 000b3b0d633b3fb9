"""`python -m evaluator CANDIDATE_DIR --target targets/X.yaml [--baseline DIR] [--json out.json]`: print a verdict.

It first measures the baseline against itself (A/A), since no speedup is a win without that noise floor;
`--calibration FILE` keeps the A/A for the next candidate judged on the same baseline, target and machine.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pydantic import ValidationError

from targets.schema import Target, TargetError, load_target

from .evaluate import calibrate_noise, evaluate
from .sandbox import REFERENCE_DIR
from .statistics import NoiseCalibration


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluator", description=__doc__.split("\n")[0].split(": ")[1])
    parser.add_argument("candidate", type=Path, help="the candidate engine package (a copy of reference_runtime/model)")
    parser.add_argument("--target", required=True, type=Path, help="target YAML (targets/*.yaml)")
    parser.add_argument("--baseline", type=Path, default=REFERENCE_DIR, help="baseline engine package "
                        "(default: the reference)")
    parser.add_argument("--json", type=Path, help="also write the verdict as JSON to this file")
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a fresh temporary one)")
    parser.add_argument("--gpu", type=int, help="GPU index to run on (CUDA targets)")
    parser.add_argument("--calibration", type=Path, help="A/A calibration JSON: read if it exists, else measured "
                        "and written there (reuse it only for the same baseline, target and machine)")
    args = parser.parse_args(argv)
    try:
        target = load_target(args.target)
    except TargetError as e:
        print(e, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="swarm-eval-") as scratch:
        work_dir = args.work_dir or Path(scratch)
        try:
            calibration = _calibration(args, target, work_dir)
        except CalibrationFileError as e:
            print(e, file=sys.stderr)
            return 2
        verdict = evaluate(args.candidate, target, baseline_dir=args.baseline, work_dir=work_dir,
                           gpu_index=args.gpu, calibration=calibration)
    print(f"{verdict.status.value}: {verdict.summary}")
    for e in verdict.evidence:
        where = ", ".join(f"{k} {v}" for k, v in (("prompt", e.prompt), ("frame", e.frame),
                                                  ("codebook", e.codebook)) if v is not None)
        print(f"  [{e.check}] {e.message}" + (f" ({where})" if where else ""))
    if args.json:
        args.json.write_text(verdict.model_dump_json(indent=2))
    return 0 if verdict.status.is_correct else 1


class CalibrationFileError(ValueError):
    pass


def _calibration(args: argparse.Namespace, target: Target, work_dir: Path) -> NoiseCalibration:
    if args.calibration and args.calibration.exists():
        try:
            calibration = NoiseCalibration.model_validate_json(args.calibration.read_text())
        except ValidationError as e:
            raise CalibrationFileError(f"{args.calibration} is not an A/A calibration ({e.error_count()} errors); "
                                       "delete it to measure a new one") from e
        if calibration.baseline != str(args.baseline):
            raise CalibrationFileError(f"{args.calibration} was measured on the baseline {calibration.baseline}, "
                                       f"not {args.baseline}: pass that --baseline or another --calibration file")
        return calibration
    print(f"A/A calibration of {args.baseline} (the baseline against itself) ...", file=sys.stderr, flush=True)
    calibration = calibrate_noise(args.baseline, target, work_dir=work_dir, gpu_index=args.gpu)
    print(f"A/A: {calibration.speedup:.3f} (CI {calibration.ci_low:.3f}..{calibration.ci_high:.3f})",
          file=sys.stderr)
    if args.calibration:
        args.calibration.write_text(calibration.model_dump_json(indent=2))
    return calibration


if __name__ == "__main__":
    sys.exit(main())
