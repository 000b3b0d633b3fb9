"""Where a streamed codec window's time goes on the GPU: the full-size codec (random weights) replayed from the
CUDA graphs cuda_graph_codec captures, per window length, and the kernels of its ops by device time (profiled
launched one by one, as a replayed graph's kernels are not all attributed):

    python3 scripts/gpu_codec_profile.py --out codec.json [--lengths 1,10,64] [--replays 20] [--inductor]
        [--cudnn-benchmark] [--plus TRANSFORM ...]

Per length: wall ms per replay (synchronised), kernel launches and device ms per replay, and the top kernels.
`--inductor` captures the inductor-compiled codec as the engines with inductor_codec do (its kernels are profiled
from the compiled function called outside a graph); `--cudnn-benchmark` lets cuDNN time its convolution
algorithms per shape (in the capture's warm-up run) instead of picking them by heuristics; `--plus` applies codec
transforms on top (e.g. codec_conv_autotune). cuDNN keeps its plans per process: compare variants in separate
runs.
`--device cpu` is a dry run of the script itself at drama3-tiny (eager codec, CPU ops).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference_runtime.codec_weights import init_codec_weights  # noqa: E402
from reference_runtime.config import get_config  # noqa: E402
from gpu_fast_check import recipe_module, sync, wall_ms  # noqa: E402  (scripts/ is on the path as the script's folder)

TOP = 12


@dataclass
class WindowProfile:
    frames: int
    wall_ms: float  # per replay, synchronised
    device_ms: float  # all kernels per replay
    launches: float  # kernels per replay
    top: list[tuple[str, float, float]]  # (kernel, device ms per replay, launches per replay)


def profile_window(codec, eager, codes: torch.Tensor, replays: int, cuda: bool) -> WindowProfile:
    """Wall time of the codec as the engine runs it (a graph replay on CUDA); kernels of `eager`, the same ops
    launched one by one (a replayed graph's kernels are not all attributed by the profiler)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):  # the first call captures the length's graph
        codec(codes)
    wall = wall_ms(lambda: [codec(codes) for _ in range(replays)], 1) / replays
    eager(codes)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(replays):
            eager(codes)
        sync()
    events = [e for e in prof.key_averages() if not e.is_user_annotation]
    self_us = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    if cuda:
        events = [e for e in events if e.self_device_time_total > 0]
    ranked = sorted(events, key=self_us, reverse=True)
    return WindowProfile(frames=codes.shape[-1], wall_ms=wall,
                         device_ms=sum(self_us(e) for e in events) / 1e3 / replays,
                         launches=sum(e.count for e in events) / replays,
                         top=[(e.key[:90], self_us(e) / 1e3 / replays, e.count / replays) for e in ranked[:TOP]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--lengths", default="1,10,64")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--inductor", action="store_true", help="the inductor-compiled codec in each graph")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    parser.add_argument("--plus", action="append", default=[], help="a codec transform applied on top (repeatable)")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    cuda = args.device == "cuda"
    config = get_config("drama3" if cuda else "drama3-tiny")
    device, dtype = torch.device(args.device), torch.bfloat16 if cuda else torch.float32
    weights = init_codec_weights(config.codec, 0, device, dtype)
    steps = (("cuda_graph_codec", {}),) + ((("inductor_codec", {}),) if args.inductor else ()) + tuple(
        (name, {}) for name in args.plus)
    pkg = recipe_module(steps, "codec_graph", "codec_profile")
    codec = pkg.GraphedCodec.from_weights(config.codec, weights, device, dtype)
    # what each graph holds, launched one by one: the compiled function, or the eager codec's ops
    ops = codec._compiled if args.inductor else (lambda c: pkg.Codec.forward(codec, c))
    header = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d"), "dtype": str(dtype), "inductor": args.inductor,
              "cudnn_benchmark": args.cudnn_benchmark, "plus": args.plus}
    print(header, flush=True)
    gen = torch.Generator().manual_seed(0)
    results = []
    with torch.inference_mode():
        for n in (int(x) for x in args.lengths.split(",")):
            codes = torch.randint(config.codec.residual_codebook_size, (1, config.num_codebooks, n), generator=gen)
            r = profile_window(codec, ops, codes.to(device), args.replays, cuda)
            results.append(r)
            print(f"\n{n}-frame window: {r.wall_ms:.3f} ms wall, {r.device_ms:.3f} ms of kernels in "
                  f"{r.launches:.0f} launches")
            for name, ms, calls in r.top:
                print(f"  {ms:8.3f} ms {calls:6.1f}x  {name}")
    Path(args.out).write_text(json.dumps(header | {"windows": [asdict(r) for r in results]}, indent=1))


if __name__ == "__main__":
    main()
