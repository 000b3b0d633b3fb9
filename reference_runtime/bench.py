r"""Streaming latency and throughput of an engine: TTFA, frames/s and RTF over warm trials (p50 / p95).

    python -m reference_runtime.bench --config drama3-tiny --device cpu --frames 24 --trials 20 \
        [--threads 1] [--json out.json]

Each trial streams one request with ignore_eos and a fixed frame count (so the work cannot shrink), first chunk
after 1 frame. `measure_trial` is the reusable per-trial measurement; `graph_ms` times GPU work replayed as a
CUDA graph (the GPU scripts and tests time kernels and steps with it).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from .api import Engine, StreamSchedule, TTSRequest, VoiceReference
from .config import Drama3Config, get_config
from .model import build_engine
from .prompt import build_rows
from .weights import init_weights

REFERENCE_SECONDS = 3.9  # the voice prompt's reference length (84 frames at 21.5 frames/s)


def graph_ms(step: Callable[[], None], replays: int = 200) -> float:
    """Mean ms of one replay of `step` captured as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # compiles the kernels before capture
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


@dataclass(frozen=True, slots=True)
class TrialResult:
    ttfa_ms: float  # request start -> first audio chunk in hand
    total_s: float  # request start -> last chunk
    num_frames: int
    audio_s: float

    @property
    def frames_per_s(self) -> float:
        return self.num_frames / self.total_s

    @property
    def rtf(self) -> float:
        return self.total_s / self.audio_s


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Median and tail of a metric over trials: p95 is the value 95% of trials did at least as well as (the
    95th percentile of a latency, the 5th of a throughput)."""

    p50: float
    p95: float

    @classmethod
    def of(cls, values: list[float], higher_is_better: bool = False) -> Percentiles:
        if len(values) == 1:
            return cls(values[0], values[0])
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return cls(statistics.median(values), cuts[4] if higher_is_better else cuts[94])


@dataclass(frozen=True, slots=True)
class PromptBench:
    name: str
    prompt_rows: int
    ttfa_ms: Percentiles
    frames_per_s: Percentiles
    rtf: Percentiles
    peak_gpu_mem_gib: float | None  # CUDA only
    trials: list[TrialResult]

    @classmethod
    def of(cls, name: str, prompt_rows: int, trials: list[TrialResult], peak_gpu_mem_gib: float | None = None
           ) -> PromptBench:
        return cls(name=name, prompt_rows=prompt_rows, ttfa_ms=Percentiles.of([r.ttfa_ms for r in trials]),
                   frames_per_s=Percentiles.of([r.frames_per_s for r in trials], higher_is_better=True),
                   rtf=Percentiles.of([r.rtf for r in trials]), peak_gpu_mem_gib=peak_gpu_mem_gib, trials=trials)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_trial(engine: Engine, request: TTSRequest, schedule: StreamSchedule) -> TrialResult:
    """Stream one request, timing with a device sync before each clock read."""
    _sync(engine.device)
    start = time.perf_counter()
    ttfa_s, num_frames, num_samples = None, 0, 0
    for chunk in engine.stream(request, schedule):
        if ttfa_s is None:
            _sync(engine.device)
            ttfa_s = time.perf_counter() - start
        num_frames, num_samples = chunk.frame_end, num_samples + chunk.audio.numel()
    _sync(engine.device)
    total_s = time.perf_counter() - start
    if ttfa_s is None:
        raise RuntimeError("the engine streamed no audio; benchmark requests need ignore_eos=True and max_frames >= 1")
    return TrialResult(ttfa_ms=ttfa_s * 1e3, total_s=total_s, num_frames=num_frames,
                       audio_s=num_samples / engine.config.codec.sample_rate)


def bench_requests(config: Drama3Config, frames: int, seed: int = 0) -> dict[str, TTSRequest]:
    """The three benchmark prompts: short, multi-sentence, and voice cloning with a seeded ~3.9 s reference."""
    gen = torch.Generator().manual_seed(seed)
    num_ref = round(REFERENCE_SECONDS * config.frames_per_second)
    codes = torch.cat((torch.randint(config.codebook_size, (1, num_ref), generator=gen),
                       torch.randint(config.codec.residual_codebook_size, (config.num_codebooks - 1, num_ref),
                                     generator=gen)))
    texts = {
        "hello": ("Hello", ()),
        "sentences": ("The quick brown fox jumps over the lazy dog. It was a bright cold day in April, and the "
                      "clocks were striking thirteen. Nobody in the village could remember why.", ()),
        "voice": ("Nice to meet you, I am glad you could come.", (VoiceReference("This is my voice.", codes),)),
    }
    return {name: TTSRequest(text=text, references=refs, seed=seed, max_frames=frames, ignore_eos=True)
            for name, (text, refs) in texts.items()}


def bench_prompt(engine: Engine, name: str, request: TTSRequest, trials: int, warmup: int,
                 schedule: StreamSchedule) -> PromptBench:
    for _ in range(warmup):
        measure_trial(engine, request, schedule)
    if engine.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(engine.device)
    results = [measure_trial(engine, request, schedule) for _ in range(trials)]
    peak = torch.cuda.max_memory_allocated(engine.device) / 2**30 if engine.device.type == "cuda" else None
    return PromptBench.of(name, build_rows(engine.config, request).shape[0], results, peak)


def format_table(results: list[PromptBench]) -> str:
    lines = [f"{'prompt':<10} {'rows':>5} {'TTFA ms p50':>12} {'p95':>9} {'frames/s p50':>13} {'p95':>9} "
             f"{'RTF p50':>9} {'p95':>8} {'peak GiB':>9}"]
    for r in results:
        peak = f"{r.peak_gpu_mem_gib:9.2f}" if r.peak_gpu_mem_gib is not None else f"{'-':>9}"
        lines.append(f"{r.name:<10} {r.prompt_rows:>5} {r.ttfa_ms.p50:>12.1f} {r.ttfa_ms.p95:>9.1f} "
                     f"{r.frames_per_s.p50:>13.1f} {r.frames_per_s.p95:>9.1f} {r.rtf.p50:>9.3f} {r.rtf.p95:>8.3f} "
                     f"{peak}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[PromptBench]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="drama3-tiny", help="model config name (drama3, drama3-tiny)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--frames", type=int, default=24, help="frames per trial (fixed work, ignore_eos)")
    parser.add_argument("--trials", type=int, default=20, help="warm trials per prompt")
    parser.add_argument("--warmup", type=int, default=2, help="untimed trials per prompt before the warm ones")
    parser.add_argument("--seed", type=int, default=0, help="weights, reference codes and sampling seed")
    parser.add_argument("--json", help="also write the results (every trial) to this JSON file")
    parser.add_argument("--threads", type=int, help="CPU intra-op threads (a target's hardware.cpu_threads)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    config = get_config(args.config)
    device = torch.device(args.device)
    engine = build_engine(config, init_weights(config, args.seed, device), device)
    schedule = StreamSchedule(first_chunk_frames=1)
    results = [bench_prompt(engine, name, request, args.trials, args.warmup, schedule)
               for name, request in bench_requests(config, args.frames, args.seed).items()]
    threads = f", CPU threads {torch.get_num_threads()}" if device.type == "cpu" else ""
    print(f"{config.name} on {device}{threads}, {args.frames} frames, {args.trials} warm trials per prompt, 1 stream")
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return results


if __name__ == "__main__":
    main()
