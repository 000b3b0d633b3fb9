"""`python -m evaluator CANDIDATE_DIR --target targets/X.yaml [--baseline DIR] [--json out.json]`: print a verdict."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from targets.schema import TargetError, load_target

from .evaluate import evaluate
from .sandbox import REFERENCE_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluator", description=__doc__.split(":")[1].strip())
    parser.add_argument("candidate", type=Path, help="the candidate engine package (a copy of reference_runtime/model)")
    parser.add_argument("--target", required=True, type=Path, help="target YAML (targets/*.yaml)")
    parser.add_argument("--baseline", type=Path, default=REFERENCE_DIR, help="baseline engine package "
                        "(default: the reference)")
    parser.add_argument("--json", type=Path, help="also write the verdict as JSON to this file")
    parser.add_argument("--work-dir", type=Path, help="scratch directory (default: a fresh temporary one)")
    parser.add_argument("--gpu", type=int, help="GPU index to run on (CUDA targets)")
    args = parser.parse_args(argv)
    try:
        target = load_target(args.target)
    except TargetError as e:
        print(e, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="swarm-eval-") as scratch:
        verdict = evaluate(args.candidate, target, baseline_dir=args.baseline,
                           work_dir=args.work_dir or Path(scratch), gpu_index=args.gpu)
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
