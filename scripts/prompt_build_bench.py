"""How long building a benchmark prompt's rows takes on this host (reference_runtime.prompt.build_rows, every
engine's first step on the time to first audio):

    python3 scripts/prompt_build_bench.py [--config drama3] [--calls 200] [--streams 5]

Per prompt: the median of --calls back-to-back calls (warm), the median of --streams calls each after the host
idled --idle-ms (as a trial's request finds it), and the median `build` part of --streams first chunks of a
drama3-tiny CPU engine's streams (gpu_fast_check.ttfa_parts: the builder as the engine calls it, after other
work). Prints a table with the host and date.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_fast_check import ttfa_parts  # noqa: E402
from reference_runtime.api import StreamSchedule  # noqa: E402
from reference_runtime.bench import bench_requests  # noqa: E402
from reference_runtime.config import get_config  # noqa: E402
from reference_runtime.model import build_engine  # noqa: E402
from reference_runtime.prompt import build_rows  # noqa: E402
from reference_runtime.tokenizer import load_tokenizer  # noqa: E402
from reference_runtime.weights import init_weights  # noqa: E402


def builder_ms(config_name: str, calls: int, idle_ms: float = 0.0) -> dict[str, float]:
    """Median ms of `calls` build_rows calls per benchmark prompt, each after the host idled `idle_ms` (0: back to
    back, warm). After an idle spell the host itself runs slower for a while (docs/benchmarks.md, session 40), so
    the idle column is what a trial's request, arriving after a wait, finds."""
    config = get_config(config_name)
    tokenizer = load_tokenizer(config)
    out = {}
    for name, request in bench_requests(config, 8).items():
        build_rows(config, request, tokenizer)
        times = []
        for _ in range(calls):
            if idle_ms:
                time.sleep(idle_ms / 1e3)
            start = time.perf_counter()
            build_rows(config, request, tokenizer)
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times) * 1e3
    return out


def in_stream_ms(streams: int) -> dict[str, float]:
    config = get_config("drama3-tiny")
    engine = build_engine(config, init_weights(config, seed=0, device="cpu"), "cpu")
    schedule = StreamSchedule(first_chunk_frames=1)
    return {name: statistics.median(ttfa_parts(engine, request, schedule).build_ms for _ in range(streams))
            for name, request in bench_requests(config, 4).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="drama3", help="the config whose tokenizer and prompts are timed warm")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--idle-ms", type=float, default=50.0, help="the sleep before each call of the idle column")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warm, streamed = builder_ms(args.config, args.calls), in_stream_ms(args.streams)
    idle = builder_ms(args.config, args.streams, args.idle_ms)
    print(f"{datetime.date.today()} {platform.node()} {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}")
    print(f"{'prompt':<10} {'warm ms (' + args.config + ')':>20} {f'after {args.idle_ms:g} ms idle':>20} "
          f"{'in a tiny stream ms':>20}")
    for name in warm:
        print(f"{name:<10} {warm[name]:>20.3f} {idle[name]:>20.3f} {streamed[name]:>20.3f}")


if __name__ == "__main__":
    main()
