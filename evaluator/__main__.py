"""`python -m evaluator CANDIDATE_DIR --target targets/X.yaml [--baseline DIR] [--json out.json]
[--calibration aa.json]`: print a verdict.

A would-be win is confirmed against the baseline's A/A noise floor, measured then (see one_off.py);
`--calibration FILE` keeps it for the next candidate judged on the same baseline, target and machine.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from targets.schema import TargetError, load_target

from .one_off import CalibrationFileError, evaluate_one_off
from .sandbox import REFERENCE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluator", description="Judge one engine package against a "
                                     "baseline: correctness, then speed.")
    parser.add_argument("candidate", type=Path, help="the candidate engine package (a copy of reference_runtime/model)")
    parser.add_argument("--target", required=True, type=Path, help="target YAML (targets/*.yaml)")
    parser.add_argument("--baseline", type=Path, default=REFERENCE_DIR, help="baseline engine package "
                        "(default: the reference)")
    parser.add_argument("--json", type=Path, help="also write the verdict as JSON to this file")
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a fresh temporary one)")
    parser.add_argument("--gpu", type=int, help="GPU index to run on (CUDA targets)")
    parser.add_argument("--calibration", type=Path, help="A/A calibration JSON: read if it exists, else written "
                        "there when a would-be win measures one (valid for one baseline, target and machine)")
    args = parser.parse_args(argv)
    try:
        target = load_target(args.target)
    except TargetError as e:
        print(e, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="swarm-eval-") as scratch:
        work_dir = args.work_dir or Path(scratch)
        try:
            verdict = evaluate_one_off(args.candidate, target, baseline_dir=args.baseline, work_dir=work_dir,
                                       gpu_index=args.gpu, keep=args.calibration,
                                       say=lambda line: print(line, file=sys.stderr))
        except CalibrationFileError as e:
            print(e, file=sys.stderr)
            return 2
    print(f"{verdict.status.value}: {verdict.summary}")
    for e in verdict.evidence:
        where = ", ".join(f"{k} {v}" for k, v in (("prompt", e.prompt), ("frame", e.frame),
                                                  ("codebook", e.codebook)) if v is not None)
        print(f"  [{e.check}] {e.message}" + (f" ({where})" if where else ""))
    if args.json:
        args.json.write_text(verdict.model_dump_json(indent=2))
    return 0 if verdict.status.is_correct else 1


if __name__ == "__main__":
    sys.exit(main())
