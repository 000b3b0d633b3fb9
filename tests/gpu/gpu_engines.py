"""Helpers of the GPU transform tests: the drama3-mid config (the full model's per-layer shapes with fewer layers
and experts), the bf16 tolerances of the H200 target, and engine packages with transforms applied."""
from __future__ import annotations

import dataclasses
import importlib
import itertools
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from candidates.repo import engine_files, write_files
from evaluator.compare import Logits, check_logits
from knowledge_base.transforms import TRANSFORMS, Params, Transform
from reference_runtime.api import SamplingParams
from reference_runtime.bench import bench_requests
from reference_runtime.config import Drama3Config, get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits
from targets.schema import ToleranceSpec, load_target

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "reference_runtime" / "model"
_counter = itertools.count()
# gpu_fast_check's fast_fused_moe stack, then the sampling kernels: the stack the fused-kernel gate tests build on
SAMPLING_STACK = ["cuda_graph_frame", "cuda_graph_codec", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet",
                  "cuda_graph_prefill", "graph_topk_sampling", "triton_moe_fused", "triton_sampling"]


def mid_config() -> Drama3Config:
    """Full per-layer dims (bf16, 128x128 FP8 blocks, GDN/attention/tower geometry), 8 layers, 32 experts."""
    full = get_config("drama3")
    return dataclasses.replace(full, name="drama3-mid", backbone=dataclasses.replace(full.backbone, num_layers=8,
                                                                                     num_experts=32),
                               text_vocab_size=512, max_context_rows=4096)


def config_named(name: str) -> Drama3Config:
    return mid_config() if name == "drama3-mid" else get_config(name)


def tolerances(config: Drama3Config) -> ToleranceSpec:
    """float32 gates for drama3-tiny, the H200 target's bf16 gates otherwise."""
    if config.name == "drama3-tiny":
        return ToleranceSpec()
    return load_target(REPO / "targets" / "drama3_h200.yaml").tolerances


def load_transformed(steps: list[tuple[Transform, Params]], root: Path):
    """The reference package with [(transform, param overrides), ...] applied, written under root (which must be
    on sys.path) and imported."""
    files = engine_files(REFERENCE)
    for transform, overrides in steps:
        patches = transform.apply(files, next(transform.variants()) | overrides)
        files = apply_edits(files, patch_edits(patches))
    name = f"gpu_engine_{next(_counter)}"
    write_files(files, root / name)
    return importlib.import_module(name)


def assert_passes_gate(config: Drama3Config, ref, eng, frames: int = 16, prompts: slice = slice(1, None)) -> None:
    """`eng`'s teacher-forced logits pass the evaluator's gate against `ref` on the bench prompts (by default
    all but "hello", 16 frames each), with the tolerances for `config`."""
    for name, request in list(bench_requests(config, frames).items())[prompts]:
        generated = ref.generate(request).frames
        rows = build_rows(config, request, ref.tokenizer)
        want, got = teacher_forced(ref, rows, generated), teacher_forced(eng, rows, generated)
        stats, evidence = check_logits(config, name, Logits(*want), Logits(*got), generated, request.sampling,
                                       tolerances(config))
        assert not evidence, f"{config.name} {name}: {stats} {evidence}"


def assert_stack_passes_gate(load_package, config: Drama3Config, steps: list[tuple[Transform, Params]]) -> None:
    """The reference package with `steps` applied (load_package's form) passes the gate against the reference, both
    built on CUDA from the same seeded weights."""
    device = torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    ref = build_engine(config, weights, device)
    assert_passes_gate(config, ref, load_package(steps).build_engine(config, weights, device))


def mixer_packages(load_package, kernels: list[str]) -> dict:
    """Engine packages whose decode_step mixers the backbone-kernel tests compare: {"torch": cuda_graph_frame,
    "inductor": + inductor_decode_steps, "triton": + `kernels`, "triton_inductor": the kernels outside inductor
    with the add and the norm around them compiled (the fast stacks' case)}."""
    frame, inductor = (TRANSFORMS["cuda_graph_frame"], {}), (TRANSFORMS["inductor_decode_steps"], {})
    with_kernels = [(TRANSFORMS[n], {}) for n in kernels]
    return {"torch": load_package([frame]), "inductor": load_package([frame, inductor]),
            "triton": load_package(with_kernels), "triton_inductor": load_package(with_kernels + [inductor])}


def kv_caches(cache_type: type, geo, gen: torch.Generator, count: int) -> list:
    """`count` 4096-row bf16 KV caches of `cache_type` (an engine package's StaticKVCache, for `geo`'s heads) on
    the GPU, holding the same random rows."""
    caches = [cache_type(4096, geo.num_kv_heads, geo.head_dim, torch.bfloat16, torch.device("cuda"))
              for _ in range(count)]
    keys, values = (torch.randn(caches[0].keys.shape, generator=gen, device="cuda") for _ in range(2))
    for cache in caches:
        cache.keys.copy_(keys)
        cache.values.copy_(values)
    return caches


def assert_bf16_close(got: torch.Tensor, want: torch.Tensor, tol: float = 2e-2) -> None:
    """bf16 outputs a rounding step or two apart (fp32 sums in another order; softmax weights rounded to bf16).
    The absolute slack shrinks with small outputs: the full-size o_proj output peaks near 0.04."""
    scale = want.abs().max().item()
    assert got.dtype == want.dtype == torch.bfloat16 and scale > 0
    torch.testing.assert_close(got.float(), want.reshape(got.shape).float(), atol=tol * min(scale, 1.0), rtol=tol)


def delta_rule_inputs(tokens: int, correlated: bool = False) -> tuple[torch.Tensor, ...]:
    """delta_rule's inputs at the full model's Gated DeltaNet dims, as the layer makes them, and a start state, on
    the GPU; `correlated`: keys near one direction per head, beta near 1 and almost no decay (the chunk form's
    triangular inverse's hard case)."""
    cfg, dev = get_config("drama3").backbone, torch.device("cuda")
    nv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    gen = torch.Generator(device=dev).manual_seed(tokens)
    q = F.normalize(torch.randn(tokens, nv, dk, generator=gen, device=dev), dim=-1) * dk ** -0.5
    k = torch.randn(tokens, nv, dk, generator=gen, device=dev)
    if correlated:
        k = torch.randn(1, nv, dk, generator=gen, device=dev) + 0.2 * k
    k = F.normalize(k, dim=-1)
    v = torch.randn(tokens, nv, dv, generator=gen, device=dev)
    beta, g = torch.rand(tokens, nv, generator=gen, device=dev), -torch.rand(tokens, nv, generator=gen, device=dev)
    if correlated:
        beta, g = 0.9 + 0.1 * beta, 0.01 * g
    return q, k, v, beta, g, torch.randn(nv, dk, dv, generator=gen, device=dev)


def graphed_call_us(fn, args) -> float:
    """One call's time inside a CUDA graph of 20 (no host launch overhead), as a prefill graph replays it."""
    fn(*args)  # compile, outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            fn(*args)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 20 * 1e3


def mid_engines(load_package, *stacks: list[tuple[Transform, Params]]) -> tuple:
    """(config, the eager reference, an engine per stack of (transform, params)) at drama3-mid on CUDA, one set of
    seeded weights shared by all."""
    config, device = config_named("drama3-mid"), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    return config, build_engine(config, weights, device), *(load_package(steps).build_engine(config, weights, device)
                                                           for steps in stacks)


def bench_rows(config: Drama3Config, tokenizer, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """name -> the benchmark prompt's rows on CUDA."""
    requests = bench_requests(config, 1)
    return {name: build_rows(config, requests[name], tokenizer).cuda() for name in names}


def prefill_ms_after(engines: dict, before: list[torch.Tensor], rows: torch.Tensor,
                     trials: int = 6) -> dict[str, float]:
    """name -> median wall ms of each engine's prefill of `rows` right after its prefills of `before` (what a prefix
    cache finds depends on them), the engines taken in turn in each trial; the first trial is a warm-up."""
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(trials):
        for name, engine in engines.items():
            for earlier in before:
                engine.prefill(earlier, SamplingParams(), 0)
            torch.cuda.synchronize()
            started = time.perf_counter()
            engine.prefill(rows, SamplingParams(), 0)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - started) * 1e3)
    return {name: statistics.median(t[1:]) for name, t in times.items()}
