"""Streams served at once on one GPU by instances of one engine, side by side with one stream alone:

    python3 scripts/gpu_concurrency.py --out conc.json --kept best --streams 1,4,16 [--frames 200 --trials 3]
    python3 scripts/gpu_concurrency.py --out conc.json --kept best --kept-plus triton_code_heads,pipelined_frames
    python3 scripts/gpu_concurrency.py --out conc.json --recipe proven --streams 1,4
    dry run: --device cpu --config drama3-tiny --recipe reference --streams 1,2 --frames 3

No engine batches streams yet. Each instance shares the weights and holds its own state, CUDA graphs and CUDA
stream, and serves one request in its own thread; N streams start together. So the aggregate frames/s says how
much of the GPU one stream leaves idle (about half of a frame's kernel time is fixed launch costs and dependent
steps, docs/benchmarks.md session 18), not what a batched decode, which reads each weight once for all its
streams, would reach. Every concurrent stream must equal the same instance's stream of the same request served alone:
the instances share nothing writable. The table gives, per N: the aggregate frames/s (N x frames over the time
from the common start to the last stream's end, the median over trials), each stream's frames/s and time to
first audio, and the aggregate's ratio to N = 1, measured in the same process. Instances are built up to the
largest N, stopping early if the device runs out of memory. Streams follow the GPU targets' schedule: a 1-frame
first chunk, later chunks with 32 frames of codec left context (--overlap-frames; session 22's figures re-decoded
the whole history).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from gpu_fast_check import (RECIPES, import_package, kept_record, kept_stack, overlaps_arg, package_root,  # noqa: E402
                            recipe_files, release, title_and_files)

from reference_runtime.api import StreamSchedule, TTSRequest  # noqa: E402
from reference_runtime.bench import bench_requests  # noqa: E402
from reference_runtime.config import get_config  # noqa: E402
from reference_runtime.weights import init_weights  # noqa: E402


@dataclass(frozen=True)
class Stream:
    """One stream's clock readings (seconds on one perf_counter) and its frames."""
    started: float
    first_audio: float
    ended: float
    frames: torch.Tensor


@dataclass(frozen=True)
class Row:
    streams: int
    aggregate_frames_per_s: float  # median over trials
    stream_frames_per_s_p50: float
    ttfa_ms_p50: float
    ttfa_ms_p95: float
    vs_one: float | None  # aggregate / the N = 1 aggregate of this run
    equal_to_alone: bool


def serve(engine, request: TTSRequest, schedule: StreamSchedule, start: threading.Barrier | None) -> Stream:
    """Stream `request` on `engine` in this thread (on a CUDA stream of its own), clocked with this stream's syncs
    only: a device-wide sync would wait for the other threads' work."""
    cuda = engine.device.type == "cuda"
    side = torch.cuda.Stream(engine.device) if cuda else None
    done = (lambda: side.synchronize()) if cuda else (lambda: None)
    with torch.inference_mode(), (torch.cuda.stream(side) if cuda else nullcontext()):
        if start is not None:
            start.wait()
        started, first, frames = time.perf_counter(), None, []
        for chunk in engine.stream(request, schedule):
            if first is None:
                done()
                first = time.perf_counter()
            frames.append(chunk.frames)
        done()
        return Stream(started, first, time.perf_counter(), torch.cat(frames).cpu())


def at_once(engines: list, requests: list[TTSRequest], schedule: StreamSchedule) -> list[Stream]:
    """Each engine serves its request in its own thread, all starting together."""
    start = threading.Barrier(len(engines))
    results: list[Stream | BaseException | None] = [None] * len(engines)

    def run(i: int) -> None:
        try:
            results[i] = serve(engines[i], requests[i], schedule, start)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            start.abort()
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is not None:
        raise failed
    return results  # type: ignore[return-value]


def build_instances(pkg, config, weights, device: torch.device, count: int) -> list:
    """Up to `count` instances; fewer when the device runs out of memory."""
    engines = []
    for i in range(count):
        t0 = time.perf_counter()
        try:
            engines.append(pkg.build_engine(config, weights, device))
        except torch.OutOfMemoryError:
            print(f"instance {i + 1}: out of device memory; going on with {i}", flush=True)
            release()
            break
        held = f", {torch.cuda.memory_allocated(device) / 2**30:.1f} GiB allocated" if device.type == "cuda" else ""
        print(f"instance {i + 1}: built in {time.perf_counter() - t0:.1f} s{held}", flush=True)
    return engines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="JSON results path")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kept", help="a kept engine of $SWARM_HOME's knowledge base: an id or 'best'")
    source.add_argument("--recipe", help=f"'reference' or a transform recipe of gpu_fast_check.py: {sorted(RECIPES)}")
    parser.add_argument("--kept-plus", default="",
                        help="with --kept, these applied on top, comma-separated, as gpu_fast_check.py's --kept-plus "
                             "('leap' first: the offline proposer's next leap on the kept engine)")
    parser.add_argument("--streams", default="1,4,16", help="concurrent stream counts, comma-separated")
    parser.add_argument("--prompt", default="sentences", help="benchmark prompt every stream speaks")
    parser.add_argument("--frames", type=int, default=200, help="frames per stream")
    parser.add_argument("--overlap-frames", default="32", type=overlaps_arg,
                        help="codec left context of the streams' later chunks: frames (the GPU targets' 32, as "
                             "SGLang-Omni's streamer) or 'none' (the whole history, as session 22's figures)")
    parser.add_argument("--trials", type=int, default=3, help="timed rounds per stream count (after one warm-up)")
    parser.add_argument("--config", default="drama3", help="model config (drama3-tiny for a dry run)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    counts = sorted({int(n) for n in args.streams.split(",") if n})
    if not counts or counts[0] < 1:
        sys.exit("--streams takes positive counts, e.g. 1,4,16")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: pass --device cpu --config drama3-tiny for a dry run")
    if args.recipe is not None and args.recipe != "reference" and args.recipe not in RECIPES:
        sys.exit(f"unknown recipe {args.recipe!r} (known: reference, {', '.join(sorted(RECIPES))})")
    if args.kept_plus and not args.kept:
        sys.exit("--kept-plus needs --kept")
    if len(args.overlap_frames) != 1:
        sys.exit("--overlap-frames takes one value here")
    config, device = get_config(args.config), torch.device(args.device)
    if args.kept:
        record = kept_record(args.kept, config.name)
        title, files = title_and_files(record)
        plus, files = kept_stack(record, files, [p for p in args.kept_plus.split(",") if p])
        title = " + ".join([title, *plus])
    else:
        title, files = args.recipe, recipe_files(RECIPES.get(args.recipe, ()))
    pkg = import_package(files, package_root("concurrency_"), "concurrency_engine")
    weights = init_weights(config, seed=0, device=device)
    engines = build_instances(pkg, config, weights, device, counts[-1])
    counts = [n for n in counts if n <= len(engines)]
    if not counts:
        sys.exit("not even one instance could be built")
    base = bench_requests(config, args.frames)[args.prompt]
    requests = [dataclasses.replace(base, seed=1000 + i) for i in range(len(engines))]
    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=args.overlap_frames[0])
    # alone: the frames every concurrent stream must equal, and each instance's warm-up (lazy captures)
    alone = [serve(e, r, schedule, None).frames for e, r in zip(engines, requests)]
    rows: list[Row] = []
    for n in counts:
        aggregates, streams, equal = [], [], True
        for trial in range(args.trials + 1):
            got = at_once(engines[:n], requests[:n], schedule)
            equal &= all(torch.equal(s.frames, a) for s, a in zip(got, alone))
            if trial:  # the first round warms the threads' streams
                wall = max(s.ended for s in got) - min(s.started for s in got)
                aggregates.append(n * args.frames / wall)
                streams += got
        ttfa = sorted((s.first_audio - s.started) * 1e3 for s in streams)
        aggregate = statistics.median(aggregates)
        one = aggregate if n == 1 else next((x.aggregate_frames_per_s for x in rows if x.streams == 1), None)
        rows.append(Row(n, aggregate, statistics.median(args.frames / (s.ended - s.started) for s in streams),
                        statistics.median(ttfa), ttfa[round(0.95 * (len(ttfa) - 1))],
                        None if one is None else aggregate / one, equal))
        r = rows[-1]
        print(f"{n:>3} streams: {r.aggregate_frames_per_s:8.1f} frames/s in all, {r.stream_frames_per_s_p50:7.1f} "
              f"per stream, TTFA p50 {r.ttfa_ms_p50:.1f} ms p95 {r.ttfa_ms_p95:.1f} ms"
              f"{'' if r.vs_one is None else f', {r.vs_one:.2f}x one stream'}"
              f"{'' if r.equal_to_alone else '; OUTPUT DIFFERS FROM THE STREAM ALONE'}", flush=True)
        args.out.write_text(json.dumps({
            "engine": title, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "config": config.name, "prompt": args.prompt, "frames": args.frames,
            "overlap_frames": args.overlap_frames[0],
            "trials": args.trials, "instances": len(engines), "rows": [asdict(x) for x in rows]}, indent=1))
    if not all(r.equal_to_alone for r in rows):
        sys.exit("a concurrent stream differed from the same request served alone: the instances share state")


if __name__ == "__main__":
    main()
