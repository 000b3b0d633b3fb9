"""A kept engine extended as gpu_fast_check's --kept-plus would extend it, checked end to end on CPU before a lease
spends GPU time on it: built at drama3-tiny under the Triton interpreter, its teacher-forced logits against the
reference (hello and voice) and a seeded generation against the kept engine's with only the first stack.

    SWARM_HOME=<state> TRITON_INTERPRET=1 python3 scripts/cpu_stack_check.py --base <items> --plus <items>

Items as gpu_fast_check's --kept-plus takes them (comma-separated; `renew:<name>` renews an applied transform;
`leap` first in --base: the offline proposer's next leap on the kept engine).
torch.compile is switched off: dynamo cannot trace the interpreter's kernels, and the compiled prefill's ops are
checked by the transforms' own interpreter tests (tests/transforms/interpret_*.py, with aot_eager).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reference_runtime.api import SamplingParams, TTSRequest  # noqa: E402
from reference_runtime.bench import bench_requests  # noqa: E402
from reference_runtime.config import get_config  # noqa: E402
from reference_runtime.model import build_engine  # noqa: E402
from reference_runtime.prompt import build_rows  # noqa: E402
from reference_runtime.teacher_forcing import teacher_forced  # noqa: E402
from reference_runtime.weights import init_weights  # noqa: E402
from scripts.gpu_fast_check import (LEAP_ITEM, import_package, kept_record, kept_stack, package_root,  # noqa: E402
                                    title_and_files)
from scripts.interpreter_loops import runtime_trip_counts  # noqa: E402


def _max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference over the finite logits; both must be infinite at the same places."""
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        raise AssertionError("the engines' logits are infinite at different places")
    return (got[finite] - want[finite]).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kept", default="best", help="kept engine id, or best (the kept drama3 CUDA engine)")
    parser.add_argument("--base", default="", help="items the comparison engine has on top of the kept one")
    parser.add_argument("--plus", required=True, help="items the checked engine has on top of --base")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1: the engines' Triton kernels run under the interpreter on CPU")
    torch.compile = lambda fn=None, **_: fn if fn is not None else (lambda f: f)  # see the module docstring
    plus = [i for i in args.plus.split(",") if i]
    if LEAP_ITEM in plus:
        sys.exit(f"--plus: {LEAP_ITEM} is the base's (--base {LEAP_ITEM}), not something checked on top of it")
    record = kept_record(args.kept, "drama3")
    _, base = kept_stack(record, title_and_files(record)[1], [i for i in args.base.split(",") if i])
    _, checked = kept_stack(record, base, plus)
    root = package_root("cpu_stack_check_")
    engines = {"base": import_package(base, root, "stack_base"),
               "checked": import_package(checked, root, "stack_checked")}
    config = get_config("drama3-tiny")
    weights = init_weights(config, seed=0, device="cpu")
    ref = build_engine(config, weights, "cpu")
    valid = config.codec.residual_codebook_size  # the fast engines' code logits past the codebook are unset
    for name, pkg in engines.items():
        engine = pkg.build_engine(config, weights, "cpu")
        for prompt in ("hello", "voice"):
            request = bench_requests(config, 3)[prompt]
            rows, frames = build_rows(config, request, ref.tokenizer), ref.generate(request).frames
            start = time.time()
            want, got = teacher_forced(ref, rows, frames), teacher_forced(engine, rows, frames)
            error = max(_max_error(got.main, want.main), _max_error(got.codes[..., :valid], want.codes[..., :valid]))
            print(f"{name} {prompt} ({rows.shape[0]} rows): max logit error {error:.2e} ({time.time() - start:.0f} s)",
                  flush=True)
    request = TTSRequest(text="Hello there", max_frames=8, ignore_eos=True, seed=3,
                         sampling=SamplingParams(code_top_k=8, ras_top_k=8))  # the tiny heads are 64 wide
    same = torch.equal(*(pkg.build_engine(config, weights, "cpu").generate(request).frames for pkg in engines.values()))
    print(f"seeded generations equal: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    with runtime_trip_counts():
        main()
