"""Full-size Drama 3 reference on one GPU: load, generate 200 frames, then the three-prompt streaming bench.

    python scripts/gpu_reference.py --out ref.json [--frames 200] [--budget-s 300]

The eager reference is slow at full size, so the number of warm trials per prompt is the largest <= 20 that
fits --budget-s (measured from the warmup trial); the table says how many ran.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict

import torch

from reference_runtime.api import StreamSchedule, TTSRequest
from reference_runtime.bench import bench_prompt, bench_requests, format_table, measure_trial
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="drama3")
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    config = get_config(args.config)
    t0 = time.perf_counter()
    weights = init_weights(config, 0, device)
    sync()
    init_s = time.perf_counter() - t0
    engine = build_engine(config, weights, device)
    sync()
    build_s = time.perf_counter() - t0 - init_s
    print(f"{name} torch {torch.__version__} cuda {torch.version.cuda} "
          f"python {platform.python_version()}; init {init_s:.1f} s, build {build_s:.1f} s, "
          f"weights {torch.cuda.memory_allocated() / 2**30 if device.type == 'cuda' else 0:.1f} GiB")

    requests = bench_requests(config, args.frames)
    gen_request = TTSRequest(**{**{f: getattr(requests["sentences"], f) for f in
                                  ("text", "references", "sampling", "seed")}, "max_frames": args.frames,
                                "ignore_eos": True})
    t0 = time.perf_counter()
    generation = engine.generate(gen_request)
    sync()
    gen_s = time.perf_counter() - t0
    print(f"generate: {generation.frames.shape[0]} frames, {generation.audio.numel()} samples in {gen_s:.1f} s "
          f"({generation.frames.shape[0] / gen_s:.2f} frames/s), audio finite: "
          f"{bool(torch.isfinite(generation.audio).all())}, rms {generation.audio.pow(2).mean().sqrt():.3f}")

    schedule = StreamSchedule(first_chunk_frames=1)
    warm = measure_trial(engine, requests["hello"], schedule)
    trials = max(1, min(20, int(args.budget_s / (3 * warm.total_s)) - 1))
    results = [bench_prompt(engine, name, request, trials, 1, schedule) for name, request in requests.items()]
    print(f"{config.name} eager reference on {name}, {args.frames} frames, {trials} warm "
          f"trials per prompt (budget {args.budget_s:.0f} s), first chunk 1 frame, 1 stream")
    print(format_table(results))
    with open(args.out, "w") as f:
        json.dump({"gpu": name, "torch": torch.__version__, "cuda": torch.version.cuda,
                   "date": time.strftime("%Y-%m-%d"), "frames": args.frames, "trials": trials,
                   "init_s": init_s, "generate_frames_per_s": generation.frames.shape[0] / gen_s,
                   "results": [asdict(r) for r in results]}, f, indent=2)


if __name__ == "__main__":
    main()
