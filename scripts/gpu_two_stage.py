"""2-GPU benchmark of the codec placement: one engine built twice from one weight dict, generation on cuda:0 and
the codec on cuda:0 ("one_gpu") or on cuda:1 ("two_gpu"), streaming trials of the target's prompts interleaved:

    python scripts/gpu_two_stage.py --out two_stage.json [--engine DIR] [--recipe graph] [--trials 20]

--engine is an engine package directory (default: the reference), --kept a kept engine of $SWARM_HOME's knowledge
base (an id or "best"), --recipe
applies one of scripts/gpu_fast_check.py's transform recipes on top of it. Each trial is the evaluator's
benchmark trial (fixed frames, ignore_eos, fresh suffix word, codes and seed), the same request for both
placements, their order alternating; TTFA is to the first chunk (1 frame), timed as reference_runtime.bench does.
(`--device cpu --config drama3-tiny --frames 8 --trials 2` is a dry run of the script itself, both on CPU.)
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_fast_check import RECIPES, import_package, kept_engine, package_root, recipe_files

from candidates.repo import engine_files
from evaluator.inputs import trial_request
from evaluator.streams import stream_schedule
from reference_runtime.bench import PromptBench, TrialResult, format_table, measure_trial
from reference_runtime.config import get_config
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights
from targets.schema import load_target

REFERENCE = REPO / "reference_runtime" / "model"


def placements(device: str) -> dict[str, tuple[torch.device, torch.device]]:
    """label -> (generation device, codec device)."""
    if device == "cpu":
        return {"one_gpu": (torch.device("cpu"),) * 2, "two_gpu": (torch.device("cpu"),) * 2}
    found = torch.cuda.device_count()
    if found < 2:
        sys.exit(f"gpu_two_stage needs 2 visible GPUs (generation on cuda:0, the codec on cuda:1), found {found}; "
                 "run it on a 2-GPU machine, or `--device cpu --config drama3-tiny` for a dry run")
    gen = torch.device("cuda:0")
    return {"one_gpu": (gen, gen), "two_gpu": (gen, torch.device("cuda:1"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON results path")
    parser.add_argument("--engine", type=Path, default=REFERENCE, help="engine package directory")
    parser.add_argument("--kept",
                        help="instead of --engine, a kept engine of $SWARM_HOME's knowledge base: id or 'best'")
    parser.add_argument("--recipe", choices=sorted(RECIPES), help="transforms applied on top of --engine")
    parser.add_argument("--target", type=Path, default=REPO / "targets" / "drama3_h200.yaml",
                        help="prompts, frames and trial counts come from its benchmark section")
    parser.add_argument("--frames", type=int, help="frames per trial (default: the target's)")
    parser.add_argument("--trials", type=int, help="timed trials per prompt and placement (default: the target's)")
    parser.add_argument("--warmup", type=int, help="untimed trials per prompt and placement (default: the target's)")
    parser.add_argument("--config", help="model config (default: the target's; drama3-tiny for a dry run)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seed", type=int, default=0, help="weights and trial inputs")
    args = parser.parse_args()

    where = placements(args.device)
    target = load_target(args.target)
    spec = target.benchmark
    frames, trials = args.frames or spec.frames, args.trials or spec.warm_trials
    warmup = spec.warmup_trials if args.warmup is None else args.warmup
    config = get_config(args.config or target.model.config)
    root = package_root("two_stage_")
    base = kept_engine(args.kept, config.name)[1] if args.kept else engine_files(args.engine)
    package = import_package(recipe_files(RECIPES[args.recipe] if args.recipe else (), base), root, "two_stage_engine")
    generation = where["one_gpu"][0]
    weights = init_weights(config, args.seed, generation)  # one dict: the codec placement is the only difference
    engines = {label: package.build_engine(config, weights, gen, codec_device=codec)
               for label, (gen, codec) in where.items()}
    header = {"engine": args.kept or str(args.engine), "recipe": args.recipe, "config": config.name, "frames": frames,
              "trials": trials, "warmup": warmup, "torch": torch.__version__,
              "devices": {label: [str(gen), str(codec)] for label, (gen, codec) in where.items()},
              "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    print(header, flush=True)

    rng = random.Random(args.seed)
    schedule = stream_schedule(spec)
    results: dict[str, dict[str, list[TrialResult]]] = {label: {p.name: [] for p in spec.prompts} for label in where}
    rows: dict[str, int] = {}
    for r in range(warmup + trials):
        for i, prompt in enumerate(spec.prompts):
            request = trial_request(config, prompt, rng, frames)
            rows[prompt.name] = build_rows(config, request).shape[0]
            order = list(engines) if (r * len(spec.prompts) + i) % 2 == 0 else list(reversed(engines))
            for label in order:
                trial = measure_trial(engines[label], request, schedule)
                if r >= warmup:
                    results[label][prompt.name].append(trial)

    report = {label: [PromptBench.of(name, rows[name], done) for name, done in by_prompt.items()]
              for label, by_prompt in results.items()}
    for label, benches in report.items():
        gen, codec = where[label]
        print(f"\n{label}: generation on {gen}, codec on {codec}, {frames} frames, {trials} trials per prompt")
        print(format_table(benches))
    print("\ntwo_gpu vs one_gpu (p50): " + ", ".join(
        f"{one.name} frames/s x{two.frames_per_s.p50 / one.frames_per_s.p50:.3f} TTFA "
        f"{two.ttfa_ms.p50 - one.ttfa_ms.p50:+.2f} ms" for one, two in zip(report["one_gpu"], report["two_gpu"])))
    peaks = {f"cuda:{i}": torch.cuda.max_memory_allocated(i) / 2**30 for i in range(torch.cuda.device_count())}
    Path(args.out).write_text(json.dumps(header | {"peak_gib": peaks, "results": {
        label: [asdict(b) for b in benches] for label, benches in report.items()}}, indent=1))


if __name__ == "__main__":
    main()
