"""A CPU stack against the reference at 2 and at 1 OpenMP threads per worker, on an idle machine and next to one
busy process standing in for a CI neighbour (docs/benchmarks.md, "CPU threads on a shared machine"):

    python scripts/cpu_threads_noise.py [--out verdicts.json]

The stack is gqa_sdpa + fp8_dequant_at_build + rope_tables (the offline demo's first kept ones); the target is
drama3_cpu.yaml cut to the full-loop test's settings (prompt `hello`, 12 frames, 12 warm pairs) with
`hardware.cpu_threads` set per row. Each row is one `swarm eval`-style one-off evaluation, A/A measured for a win.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from candidates.repo import write_files
from evaluator.one_off import evaluate_one_off
from evaluator.sandbox import REFERENCE_DIR
from scripts.gpu_fast_check import recipe_files
from targets import load_target

STACK = (("gqa_sdpa", {}), ("fp8_dequant_at_build", {}), ("rope_tables", {"table_rows": 16384}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write every verdict here (JSON list)")
    args = parser.parse_args()
    base = load_target(REPO / "targets" / "drama3_cpu.yaml")
    bench = base.benchmark.model_copy(update={"prompts": base.benchmark.prompts[:1], "frames": 12,
                                              "warm_trials": 12, "warmup_trials": 1})
    tolerances = base.tolerances.model_copy(update={"prompts": 1, "frames": 6})
    work = Path(tempfile.mkdtemp(prefix="cpu_threads_"))
    candidate = work / "candidate"
    write_files(recipe_files(STACK), candidate)
    print(f"{'threads':>7} {'neighbour':>9} {'baseline fps':>12} {'candidate fps':>13} {'speedup (95% CI)':>24} "
          "verdict")
    verdicts = []
    for threads in (2, 1):
        for busy in (False, True):
            hardware = base.hardware.model_copy(update={"cpu_threads": threads})
            target = base.model_copy(update={"hardware": hardware, "benchmark": bench, "tolerances": tolerances})
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                verdict = evaluate_one_off(candidate, target, baseline_dir=REFERENCE_DIR,
                                           work_dir=work / f"t{threads}_busy{int(busy)}", say=lambda _: None)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            verdicts.append({"threads": threads, "busy_neighbour": busy, "verdict": verdict.model_dump(mode="json")})
            c = verdict.comparison
            fps = [b.prompts[0].frames_per_s_p50 if b else float("nan")
                   for b in (verdict.baseline_bench, verdict.candidate_bench)]
            ci = f"{c.speedup:.3f} ({c.ci_low:.3f}-{c.ci_high:.3f})" if c else "-"
            print(f"{threads:>7} {'busy' if busy else 'idle':>9} {fps[0]:>12.1f} {fps[1]:>13.1f} {ci:>24} "
                  f"{verdict.status.value}", flush=True)
            if args.out:
                args.out.write_text(json.dumps(verdicts, indent=1))


if __name__ == "__main__":
    main()
