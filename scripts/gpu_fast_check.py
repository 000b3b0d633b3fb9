"""H200 fast check of the cuda_* / triton_* transforms at full drama3 size with random weights:

    python scripts/gpu_fast_check.py --out result.json [--engines graph_triton,graph] [--frames 200]
    SWARM_HOME=<state> python scripts/gpu_fast_check.py --out result.json --engines '' --kept best \
        --kept-plus renew:triton_prefill_moe,triton_prefill_route

(`--config drama3-tiny --device cpu --frames 8` is a quick dry run of the script itself; graph stages need CUDA.)

One weight dict serves the reference engine and each transformed engine. Per engine: teacher-forced logits vs
the reference on 2 prompts x 16 frames (the evaluator's check_logits, H200 target tolerances), whether two seeded
--frames streams draw generate's frames (the evaluator's stream check at a timed trial's length), decode ms/frame
(CUDA events and synchronised wall clock), peak memory, and a per-stage breakdown from separately captured stage
graphs; then, with every transformed engine built and alive, for each of the seed's three prompts the prefill
time and streaming TTFA (1-frame first chunk), frames/s and RTF over --frames frames, the engines' trials
interleaved in a rotating order. (Timed one engine after another, the second engine's prefills ran 2-3 ms slower
with identical prefill kernels: the order biased TTFA, session 15.) A failing engine is reported and the next one
runs; the JSON is rewritten after every engine. What a process keeps once carries over between its engines: cuDNN
reuses the convolution plans the first engine's codec made for the same shapes, so codec_conv_autotune shows no
gain here (session 24); time such variants in separate processes (scripts/gpu_codec_profile.py --plus).
"""
from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from candidates.repo import EngineRepo, engine_files, write_files
from evaluator.compare import Logits, check_logits
from evaluator.inputs import random_codes
from evaluator.profile_summary import self_times
from evaluator.sandbox import CUBLAS_REPRODUCIBLE
from knowledge_base import KeptEngine, KnowledgeStore
from knowledge_base.transforms import TRANSFORMS, NotApplicable
from knowledge_base.transforms.base import literal
from knowledge_base.transforms.renew import renewal
from knowledge_base.transforms.retune import retunes
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest
from reference_runtime.bench import bench_requests, measure_trial
from reference_runtime.config import get_config
from reference_runtime.frame_bytes import frame_bytes, prefill_bytes
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import default_dtype, init_weights
from stream_idle import StreamIdle, device_events, stream_idle  # scripts/ is on the path as the script's folder
from swarm.agents.offline import LEAP, OfflineAgent
from swarm.context import build_context
from swarm.edits import apply_edits, patch_edits
from swarm.paths import engines_path, kb_path
from swarm.run_state import ParentEngine, RunView
from targets.schema import Target, load_target

# engine name -> transforms applied in order to the reference package, with parameter overrides
RECIPES: dict[str, tuple[tuple[str, dict], ...]] = {
    "graph_triton": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {})),
    "graph": (("cuda_graph_frame", {}), ("cuda_graph_codec", {})),
    "graph_unfused": (("cuda_graph_frame", {"fuse_projections": False}), ("cuda_graph_codec", {})),
    "graph_triton_compiled": (("cuda_graph_frame", {}), ("inductor_decode_steps", {}), ("cuda_graph_codec", {}),
                              ("triton_fp8_moe", {})),
    "fast": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}), ("triton_prefill_moe", {}),
             ("triton_deltanet", {})),
    "fast_compiled": (("cuda_graph_frame", {}), ("inductor_decode_steps", {}), ("cuda_graph_codec", {}),
                      ("triton_fp8_moe", {}), ("triton_prefill_moe", {}), ("triton_deltanet", {})),
    "fast_split_down": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {"down_slots": 1}),
                        ("triton_prefill_moe", {}), ("triton_deltanet", {})),
    # cuda_graph_prefill's compile_steps is spelled out: False as measured in session 3, True = inductor prefill
    "fast_graph_prefill": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}),
                           ("triton_prefill_moe", {}), ("triton_deltanet", {}),
                           ("cuda_graph_prefill", {"compile_steps": False})),
    "fast_all": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}), ("triton_prefill_moe", {}),
                 ("triton_deltanet", {}), ("cuda_graph_prefill", {"compile_steps": False}),
                 ("graph_topk_sampling", {})),
    "fast_all_compiled": (("cuda_graph_frame", {}), ("inductor_decode_steps", {}), ("cuda_graph_codec", {}),
                          ("triton_fp8_moe", {}), ("triton_prefill_moe", {}), ("triton_deltanet", {}),
                          ("cuda_graph_prefill", {"compile_steps": False}), ("graph_topk_sampling", {})),
    "fast_fused_moe": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}),
                       ("triton_prefill_moe", {}), ("triton_deltanet", {}),
                       ("cuda_graph_prefill", {"compile_steps": False}), ("graph_topk_sampling", {}),
                       ("triton_moe_fused", {})),
    "fast_fused_moe_compiled": (("cuda_graph_frame", {}), ("inductor_decode_steps", {}), ("cuda_graph_codec", {}),
                                ("triton_fp8_moe", {}), ("triton_prefill_moe", {}), ("triton_deltanet", {}),
                                ("cuda_graph_prefill", {"compile_steps": True}), ("graph_topk_sampling", {}),
                                ("triton_moe_fused", {})),
    "fast_sampling_compiled": (("cuda_graph_frame", {}), ("inductor_decode_steps", {}), ("cuda_graph_codec", {}),
                               ("triton_fp8_moe", {}), ("triton_prefill_moe", {}), ("triton_deltanet", {}),
                               ("cuda_graph_prefill", {"compile_steps": True}), ("graph_topk_sampling", {}),
                               ("triton_moe_fused", {}), ("triton_sampling", {})),
    "fast_all_prefill_compiled": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}),
                                  ("triton_prefill_moe", {}), ("triton_deltanet", {"chunk_rows": 0}),
                                  ("cuda_graph_prefill", {"compile_steps": True}), ("graph_topk_sampling", {})),
    "fast_all_prefill_chunked": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}),
                                 ("triton_prefill_moe", {}), ("triton_deltanet", {"chunk_rows": 64}),
                                 ("cuda_graph_prefill", {"compile_steps": True}), ("graph_topk_sampling", {})),
    "fast_moe_only": (("cuda_graph_frame", {}), ("cuda_graph_codec", {}), ("triton_fp8_moe", {}),
                      ("triton_prefill_moe", {})),
    "reference_prefill": (("triton_prefill_moe", {}), ("triton_deltanet", {})),
    "graph_h5moe": (("fp8_dequant_at_build", {}), ("moe_dispatch", {"max_tokens": 64}), ("cuda_graph_frame", {}),
                    ("cuda_graph_codec", {})),
}
# the sampling stack, then the fused tower layer, then the backbone attention and DeltaNet layers through kernels
RECIPES["fast_tower_compiled"] = RECIPES["fast_sampling_compiled"] + (("triton_tower", {}),)
RECIPES["fast_attention_compiled"] = RECIPES["fast_tower_compiled"] + (("triton_backbone_attention", {}),)
RECIPES["fast_deltanet_compiled"] = RECIPES["fast_attention_compiled"] + (("triton_backbone_deltanet", {}),)
# the lineage the swarm kept in session 12, default tiles; then every transform proven on the H200
RECIPES["kept_s12"] = RECIPES["fast_deltanet_compiled"] + (("triton_moe_block", {}),)
RECIPES["proven"] = RECIPES["kept_s12"] + (("codec_overlap", {}),)
FORCED_PROMPTS, FORCED_FRAMES = ("sentences", "voice"), 16


@dataclass
class Correctness:
    prompt: str
    max_abs_err: float | None
    top1: float | None
    eos_max_err: float | None
    problems: list[str]


@dataclass
class TtfaParts:
    """A stream's first chunk cut where the engine calls build_rows, prefill and decode_audio, each call
    synchronised on both sides (so the codec's own host reads wait for nothing of the prefill's): ms from the
    stream's start to the prompt's rows built, from there to the prefill call (their copy to the device), the
    prefill, from its return to the codec call (hidden behind the prefill's kernels in an uncut stream), the codec
    window, and from its return to the chunk in hand (the audio's and frames' copies to the host)."""

    build_ms: float
    copy_ms: float
    prefill_ms: float
    between_ms: float
    codec_ms: float
    handover_ms: float
    total_ms: float


@dataclass
class PromptTiming:
    prefill_ms: float  # median of one prefill call before each streamed trial, wall clock after synchronize
    ttfa_ms: float  # medians over the streamed trials
    frames_per_s: float
    rtf: float
    # a stream's time past its first audio and its other frames' decode steps (report.decode_ms_events each): the
    # codec's later windows, the audio chunks' handover, the EOS checks; None without a decode timing
    beyond_decode_ms: float | None = None
    # the weights its prefill's rows route to (reference_runtime.frame_bytes.prefill_bytes from the expert_counts
    # diagnostic, padding rows included): what it reads, except where it reuses cached expert outputs
    # (prefix_moe_cache counts the reused rows' picks too); the reference's is the prompt's floor; None where the
    # engine keeps no counts
    prefill_gb: float | None = None
    # where a stream's time to first audio goes, medians of one instrumented first chunk per trial (TtfaParts)
    ttfa_parts: TtfaParts | None = None


@dataclass
class Report:
    engine: str
    transforms: list[str]
    build_s: float | None = None
    correctness: list[Correctness] = field(default_factory=list)
    # stream_repeats' findings: None where it did not run (the reference), [] where each stream drew generate's frames
    stream_problems: list[str] | None = None
    decode_ms_events: float | None = None
    decode_ms_wall: float | None = None
    decode_frames_per_s: float | None = None
    decode_sync_free: bool | None = None
    frame_gb: float | None = None  # what a decoded frame must read (reference_runtime.frame_bytes)
    decode_tb_per_s: float | None = None  # frame_gb over the decode step's time
    prompts: dict[str, PromptTiming] = field(default_factory=dict)
    peak_gib: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)
    kernels: list[tuple[str, float, float]] = field(default_factory=list)  # (kernel, device ms, calls) per frame
    # the same per prefill, by prompt: voice (the longest) and hello (the one nearest the TTFA goal)
    prefill_kernels: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    # by prompt: one stream under the profiler, where the GPU idles and how much the codec's stream overlaps
    stream_idle: dict[str, StreamIdle | None] = field(default_factory=dict)
    error: str | None = None


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def recipe_files(steps: tuple[tuple[str, dict], ...], files: dict[str, str] | None = None) -> dict[str, str]:
    """The engine package `files` (default: the reference's) with the transforms `steps` applied (first variant
    + overrides each)."""
    files = engine_files(REPO / "reference_runtime" / "model") if files is None else files
    for transform_name, overrides in steps:
        transform = TRANSFORMS[transform_name]
        patches = transform.apply(files, next(transform.variants()) | overrides)
        files = apply_edits(files, patch_edits(patches))
    return files


def plus_files(files: dict[str, str], items: list[str]) -> dict[str, str]:
    """`files` with each item applied in turn: `renew:<name>` brings an applied transform's kernel files to today's
    (as the swarm's renewals do), `retune:<name>:<knob>=<value>` sets one knob of an applied transform (as the
    swarm's retunes do), a bare name applies that transform's first variant."""
    for item in items:
        name = item.removeprefix("renew:").removeprefix("retune:").split(":")[0]
        if name not in TRANSFORMS:
            sys.exit(f"--kept-plus: unknown transform {name!r} (known: {sorted(TRANSFORMS)})")
        if item.startswith("retune:"):
            knob, _, value = item.split(":", 2)[-1].partition("=")
            found = [r for r in retunes(TRANSFORMS[name], files) if r.param == knob and literal(r.value) == value]
            if not found:
                sys.exit(f"--kept-plus: {item}: the engine lacks the transform's params file, or {knob}={value} is "
                         f"its current value or outside its space {TRANSFORMS[name].space.get(knob)}")
            patch = found[0].patch
            files = apply_edits(files, patch_edits([patch]))
            continue
        if not item.startswith("renew:"):
            try:
                files = recipe_files(((name, {}),), files)
            except NotApplicable as e:  # e.g. a transform whose prerequisite needs a renewal first
                sys.exit(f"--kept-plus: {item}: {e}")
            continue
        found = renewal(TRANSFORMS[name], files)
        if found is None:
            sys.exit(f"--kept-plus: {item}: the engine has today's files already, lacks the transform, or "
                     "waits for the renewal of a file it imports (renew that one first)")
        files = apply_edits(files, patch_edits(found.patches))
    return files


LEAP_ITEM = "leap"  # a --kept-plus item: the offline proposer's next leap (offline_leap)


def kept_record(engine_id: str, config_name: str) -> KeptEngine:
    """A kept engine in $SWARM_HOME's knowledge base: an id, or "best" (the highest speedup vs the reference among
    the CUDA engines kept for this model config)."""
    kb = KnowledgeStore(kb_path())
    try:
        fitting = [k for k in kb.kept_engines() if k.key.device == "cuda" and k.key.model_config == config_name]
        if not fitting:
            sys.exit(f"no kept CUDA engine for {config_name} in {kb_path()}: run the swarm first or set SWARM_HOME")
        kept = max(fitting, key=lambda k: k.speedup_vs_reference) if engine_id == "best" else kb.kept_engine(engine_id)
    finally:
        kb.close()
    print(f"kept engine {kept.id}: {kept.title} ({kept.speedup_vs_reference:.2f}x the reference)", flush=True)
    return kept


def title_and_files(kept: KeptEngine) -> tuple[str, dict[str, str]]:
    return f"{kept.id}: {kept.title}", EngineRepo(engines_path()).files(kept.git_commit)


def kept_engine(engine_id: str, config_name: str) -> tuple[str, dict[str, str]]:
    """(title, files) of kept_record's engine."""
    return title_and_files(kept_record(engine_id, config_name))


def offline_leap(kept: KeptEngine, files: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(title, files) of the leap the offline proposer would evaluate next on `kept` (its `files`) if the run that
    kept it resumed: the context the swarm builds (the run's target and failures, the knowledge base's lessons, the
    lineage), its slots in turn until one leaps; else an error saying why."""
    kb = KnowledgeStore(kb_path())
    try:
        view = RunView.load(kb, kept.run_id)
        target = Target.model_validate_json(view.run.target_json)
        iteration = 1 + max((c.iteration for c in view.candidates), default=0)
        parent = ParentEngine(kept.id, kept.git_commit, kept.figures, kept.speedup_vs_reference)
        contexts = [build_context(target, kb, view, kept.key, parent, files, iteration, slot)
                    for slot in range(target.candidates_per_iteration)]
    finally:
        kb.close()
    for context in contexts:
        proposal = OfflineAgent("leap").propose(context)
        if proposal.title.startswith(LEAP):
            return proposal.title, apply_edits(files, proposal.edits)
    sys.exit(f"--kept-plus leap: the offline proposer has no leap on {kept.id} (tried on it already, or fewer than "
             "two proven transforms it lacks); name the transforms instead")


def kept_stack(kept: KeptEngine, files: dict[str, str], items: list[str]) -> tuple[list[str], dict[str, str]]:
    """A --kept-plus stack on `kept` (its `files`): (the stack's labels, its files). `leap` first stands for
    offline_leap's stack, labelled by its title; the other items are plus_files's."""
    labels = list(items)
    if items and items[0] == LEAP_ITEM:
        title, files = offline_leap(kept, files)
        print(title, flush=True)
        items, labels = items[1:], [title, *items[1:]]
    if LEAP_ITEM in items:
        sys.exit(f"--kept-plus: {LEAP_ITEM} comes first in a stack, before what is added to it")
    return labels, plus_files(files, items)


def package_root(prefix: str) -> Path:
    """A fresh temporary directory on sys.path, for import_package; removed when the process exits, so repeated
    runs (CI runs the scripts' dry runs every time) leave nothing behind in /tmp."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    sys.path.insert(0, str(root))
    return root


def import_package(files: dict[str, str], root: Path, name: str):
    """Write `files` to root/name (root from package_root) and import it."""
    write_files(files, root / name)
    return importlib.import_module(name)


def recipe_module(steps: tuple[tuple[str, dict], ...], module: str, name: str):
    """One module (e.g. a kernel file) of the engine built by `steps`, imported as package `name`: what the kernel
    benches time."""
    engine = import_package(recipe_files(steps), package_root(f"{name}_"), name)
    return importlib.import_module(f"{engine.__name__}.{module}")


def events_ms(fn: Callable[[], object], repeats: int) -> float:
    if not torch.cuda.is_available():
        return wall_ms(lambda: [fn() for _ in range(repeats)], 1) / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sync()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    sync()
    return start.elapsed_time(end) / repeats


def wall_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def check(engine, oracle: dict, config, tol) -> list[Correctness]:
    out = []
    for prompt, (request, rows, frames, want) in oracle.items():
        got = teacher_forced(engine, rows, frames)
        stats, evidence = check_logits(config, prompt, Logits(*want), Logits(*got), frames, request.sampling, tol)
        out.append(Correctness(prompt, stats and stats.max_abs_err, stats and stats.top1, stats and stats.eos_max_err,
                               [f"{e.message} (frame {e.frame}, codebook {e.codebook}, value {e.value})"
                                for e in evidence]))
    return out


def stream_repeats(engine, config, frames: int, overlap: int | None, streams: int = 2) -> list[str]:
    """The evaluator's stream check at `frames`: a seeded request's streams must each draw generate's frames. A
    stream whose work on several CUDA streams races (a shared buffer or cuBLAS workspace) parts from generate, at a
    frame that varies from run to run (session 39: frame 21 of 64)."""
    request = replace(bench_requests(config, frames)["sentences"], seed=5)
    want = engine.generate(request).frames
    problems = []
    for i in range(streams):
        chunks = list(engine.stream(request, StreamSchedule(first_chunk_frames=1, overlap_frames=overlap)))
        got = torch.cat([c.frames for c in chunks])
        if not torch.equal(got, want):
            differs = (got != want).any(dim=1).nonzero() if got.shape == want.shape else None
            where = f"from frame {int(differs[0])}" if differs is not None else f"{tuple(got.shape)} frames"
            problems.append(f"stream {i + 1} of {streams} differs from generate {where} ({frames} frames, "
                            f"overlap {overlap})")
    return problems


def time_decode(report: Report, engine, config, frames: int) -> None:
    requests = bench_requests(config, frames)
    rows = build_rows(config, requests["hello"], engine.tokenizer).to(engine.device)
    engine.prefill(rows, SamplingParams(), 0)
    engine.decode_frame()  # lazy capture or setup, untimed
    report.decode_ms_events = events_ms(engine.decode_frame, frames)
    engine.prefill(rows, SamplingParams(), 0)
    report.decode_ms_wall = wall_ms(lambda: [engine.decode_frame() for _ in range(frames)], 1) / frames
    report.decode_frames_per_s = 1e3 / report.decode_ms_events
    # at the timed frames' mean context
    reads = frame_bytes(config, default_dtype(config).itemsize, context_rows=rows.shape[0] + frames // 2)
    report.frame_gb, report.decode_tb_per_s = reads.total / 1e9, reads.total / report.decode_ms_events / 1e9
    if engine.device.type == "cuda":
        sync()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                engine.decode_frame()
            report.decode_sync_free = True
        except RuntimeError:
            report.decode_sync_free = False
        finally:
            torch.cuda.set_sync_debug_mode("default")


def expert_counts(engine) -> torch.Tensor | None:
    """The engine's (layer, expert) routing counts so far, if its backbone keeps the reference's diagnostic."""
    backbone = getattr(getattr(engine, "model", None), "backbone", None)
    return None if backbone is None or not hasattr(backbone, "expert_counts") else backbone.expert_counts().clone()


# What a timed prefill follows: the same request's prefill, or the previous prompt's with fresh voice references
FOLLOWS = ("self", "rotation")


def follow_label(prompt: str, follow: str) -> str:
    """A prompt's name in the report: bare when it follows itself, else marked as timed in the rotation."""
    return prompt if follow == "self" else f"{prompt}/rotation"


def fresh_voice(config, request: TTSRequest, key: str) -> TTSRequest:
    """`request` with new codes of the same length for each voice reference, drawn from `key`: the evaluator gives
    every trial fresh reference codes (evaluator.inputs), so an in-run prefix cache cannot keep a voice across its
    trials; timings that repeat one voice time a cache hit the judge never sees."""
    rng = random.Random(key)
    return replace(request, references=tuple(replace(r, codes=random_codes(config, rng, r.codes.shape[1]))
                                             for r in request.references))


def ttfa_parts(engine, request: TTSRequest, schedule: StreamSchedule) -> TtfaParts | None:
    """One stream's first chunk, cut where the engine calls build_rows (as its classes' modules name it), its
    prefill and its decode_audio (see TtfaParts); the stream is closed after it. None when its first chunk does not
    pass through all three."""
    marks: dict[str, float] = {}

    def cut(name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            sync()
            marks.setdefault(f"{name} called", time.perf_counter())
            out = fn(*args, **kwargs)
            sync()
            marks.setdefault(f"{name} returned", time.perf_counter())
            return out
        return timed

    modules = {m for m in (sys.modules[c.__module__] for c in type(engine).__mro__) if hasattr(m, "build_rows")}
    builders = {m: m.build_rows for m in modules}
    for m, build in builders.items():
        m.build_rows = cut("rows", build)
    engine.prefill, engine.decode_audio = cut("prefill", engine.prefill), cut("codec", engine.decode_audio)
    try:
        sync()
        start = time.perf_counter()
        stream = engine.stream(request, schedule)
        next(stream)
        sync()
        end = time.perf_counter()
        stream.close()
    finally:  # the class's methods and the modules' builder again
        del engine.prefill, engine.decode_audio
        for m, build in builders.items():
            m.build_rows = build
    names = ["rows returned", *(f"{n} {e}" for n in ("prefill", "codec") for e in ("called", "returned"))]
    if not set(names) <= set(marks):
        return None
    at = [start, *(marks[n] for n in names), end]
    return TtfaParts(*((b - a) * 1e3 for a, b in itertools.pairwise(at)), total_ms=(end - start) * 1e3)


def median_parts(parts: list[TtfaParts]) -> TtfaParts | None:
    return TtfaParts(*(statistics.median(getattr(x, f.name) for x in parts) for f in fields(TtfaParts))) \
        if parts else None


def time_streams(engines: list[tuple[Report, object]], config, frames: int, trials: int,
                 overlaps: tuple[int | None, ...] = (None,), follows: tuple[str, ...] = ("self",)) -> None:
    """Each prompt's prefill and streamed trials on every engine, interleaved: trial t runs the engines in an order
    rotated by t, so no engine always goes first. An engine whose stream fails gets the error and leaves. Per
    codec overlap (None: each chunk re-decodes the whole history), the prompts again, named "<prompt>/overlap<n>".
    Per follow: "self", a timed prefill or stream follows the same request's, the best case of an in-run prefix
    cache (voice repeats its reference rows); "rotation" (the prompt's name then ends in "/rotation"), as the
    evaluator's trials: an untimed prefill of the previous prompt in the list comes first, and every prefill and
    stream, timed or not, gets fresh voice reference codes (the same on every engine within a trial). After each
    timed stream, one more first chunk instrumented (ttfa_parts), following what the stream followed."""
    timed = list(engines)
    requests = bench_requests(config, frames)
    names = list(requests)
    streams = [(follow_label(name if overlap is None else f"{name}/overlap{overlap}", follow), requests[name],
                StreamSchedule(first_chunk_frames=1, overlap_frames=overlap),
                requests[names[i - 1]] if follow == "rotation" else None)
               for follow in follows for overlap in overlaps for i, name in enumerate(names)]
    for name, base, schedule, previous in streams:
        prefills: dict[str, list[float]] = {r.engine: [] for r, _ in timed}
        prefill_gb: dict[str, float] = {}
        results: dict[str, list] = {r.engine: [] for r, _ in timed}
        parts: dict[str, list[TtfaParts]] = {r.engine: [] for r, _ in timed}

        def trial(report: Report, engine, t: int) -> None:
            """Trial t (-1: the warm-up) of one engine."""
            def draw(request: TTSRequest, role: str) -> TTSRequest:
                return request if previous is None else fresh_voice(config, request, f"{name}/{t}/{role}")

            def follow(role: str) -> None:
                if previous is not None:
                    rows = build_rows(config, draw(previous, role), engine.tokenizer).to(engine.device)
                    engine.prefill(rows, SamplingParams(), 0)

            try:
                if t >= 0:
                    rows = build_rows(config, draw(base, "prefill"), engine.tokenizer).to(engine.device)
                    follow("before prefill")
                    before = expert_counts(engine)
                    prefills[report.engine].append(wall_ms(lambda: engine.prefill(rows, SamplingParams(), 0), 1))
                    if before is not None:
                        read = int((expert_counts(engine) != before).sum())
                        prefill_gb[report.engine] = prefill_bytes(config, read, default_dtype(config).itemsize) / 1e9
                follow("before stream")
                result = measure_trial(engine, draw(base, "stream"), schedule)
                if t >= 0:
                    results[report.engine].append(result)
                    follow("before parts")
                    if (cut := ttfa_parts(engine, draw(base, "parts"), schedule)) is not None:
                        parts[report.engine].append(cut)
            except Exception as e:  # noqa: BLE001 - one engine's failure must not stop the others
                report.error = f"stream {name}: {type(e).__name__}: {e}"
                traceback.print_exc(limit=8)
                timed.remove((report, engine))

        for report, engine in list(timed):
            trial(report, engine, -1)
        for t in range(trials):
            for report, engine in timed[t % max(len(timed), 1):] + timed[:t % max(len(timed), 1)]:
                trial(report, engine, t)
        for report, _ in timed:
            got = results[report.engine]
            beyond = None if report.decode_ms_events is None else statistics.median(
                r.total_s * 1e3 - r.ttfa_ms - (r.num_frames - 1) * report.decode_ms_events for r in got)
            report.prompts[name] = PromptTiming(statistics.median(prefills[report.engine]),
                                                statistics.median(r.ttfa_ms for r in got),
                                                statistics.median(r.frames_per_s for r in got),
                                                statistics.median(r.rtf for r in got), beyond,
                                                prefill_gb.get(report.engine), median_parts(parts[report.engine]))


def codec_stages(report: Report, engine, config) -> None:
    gen = torch.Generator().manual_seed(0)
    for n in (1, 10, 64):
        codes = torch.randint(config.codec.residual_codebook_size, (config.num_codebooks, n), generator=gen)
        engine.decode_audio(codes)
        report.stages_ms[f"codec_{n}_frames(wall)"] = wall_ms(lambda c=codes: engine.decode_audio(c), 5)


def graph_stages(report: Report, pkg, engine, config) -> None:
    """Each stage of the frame captured as its own graph and replayed (events): where the frame's time goes."""
    prog, st, step, sampling = engine.program, engine.state, pkg.decode_step, SamplingParams()
    engine.prefill(build_rows(config, bench_requests(config, 1)["hello"], engine.tokenizer).to(engine.device),
                   sampling, 0)
    span, x = engine._span(engine._rows + 1), st.buf.hidden.clone()

    # with triton_code_heads each code is drawn inside its head's kernel: "sampling" is then the main draw alone,
    # and tower_lm_head includes the code draws
    code_draws = 0 if getattr(prog, "code_heads", None) is not None else config.num_codebooks - 1

    def sampling_only() -> None:
        noise = prog.noise.draw(st.buf.seed, st.buf.pos)
        step.sample_main(st.buf.main_logits, sampling, st.recent(sampling.ras_window), noise)
        for k in range(code_draws):
            step.sample_code(st.buf.code_logits[k], sampling, config.codec.residual_codebook_size,
                             noise[step.FIRST_CODE + k])

    stages = {"frame": lambda: prog.run("frame", span, sampling), "backbone": lambda: prog.backbone(span),
              "backbone_moe": lambda: [step.moe_decode(x, lw.moe, config.backbone) for lw in prog.w.layers],
              "predict": lambda: prog.predict(span, sampling), "sampling": sampling_only}
    pool = torch.cuda.graph_pool_handle()
    with torch.inference_mode():  # the engine's state tensors are inference tensors: update them in that mode
        for name, fn in stages.items():
            graph, _ = pkg.graph_capture.capture(fn, pool, keep=st.mutable())
            graph.replay()
            report.stages_ms[name] = events_ms(graph.replay, 20)
    s = report.stages_ms
    s["backbone_mixers_norms"] = s["backbone"] - s["backbone_moe"]
    s["tower_lm_head"] = s["predict"] - s["sampling"]


def profiled(fn: Callable[[], object], repeats: int, top: int = 12,
             before: Callable[[], object] | None = None) -> list[tuple[str, float, float]]:
    """fn under the profiler: ("(all kernels)", device ms, launches) per call, then the costliest kernels. `before`
    runs ahead of each call, unprofiled (the state a call should find, e.g. another prompt's prefill)."""
    from torch.profiler import ProfilerActivity, profile

    totals: dict[str, list[int]] = {}
    for call in range(repeats + 1):  # the first call warms
        if before is not None:
            before()
        sync()
        # CPU only on a dry run, where no kernel runs and the rows stay empty
        with profile(activities=[ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU]) as prof:
            fn()
            sync()
        if call == 0:
            continue
        for name, (ns, calls) in self_times(prof.profiler.kineto_results.events(), cuda=True).items():
            total = totals.setdefault(name, [0, 0])
            total[0] += ns
            total[1] += calls
    rows = [(name, ns / 1e6 / repeats, n / repeats) for name, (ns, n) in totals.items()]
    rows.sort(key=lambda r: -r[1])
    return [("(all kernels)", sum(r[1] for r in rows), sum(r[2] for r in rows))] + rows[:top]


def kernel_profile(report: Report, engine, config, frames: int = 4, follows: tuple[str, ...] = ("self",)) -> None:
    """The decode frame run eagerly (same kernels as its graph, launched one by one) and the voice and hello
    prompts' prefills, under the profiler: device time and launches per call of the costliest kernels, and their
    total (for a prefill, set against its wall time: the gap is host overhead). Each prefill follows what
    time_streams's follows make it follow: the same request's, or (rotation) the previous benchmark prompt's, every
    call with fresh voice references."""
    sampling = SamplingParams()
    requests = bench_requests(config, 1)
    names = list(requests)
    for follow in follows:
        for prompt in ("voice", "hello"):  # hello last: the decode below continues its prefill
            rows = [build_rows(config, requests[prompt], engine.tokenizer).to(engine.device)]  # before() redraws
            before = None
            if follow == "rotation":
                def before(prompt=prompt, rows=rows, draws=itertools.count()) -> None:
                    key, previous = f"{prompt}/{next(draws)}", requests[names[names.index(prompt) - 1]]
                    ahead = build_rows(config, fresh_voice(config, previous, f"{key}/previous"), engine.tokenizer)
                    engine.prefill(ahead.to(engine.device), sampling, 0)
                    rows[0] = build_rows(config, fresh_voice(config, requests[prompt], key),
                                         engine.tokenizer).to(engine.device)
            # 40 rows: thousands of small kernels share the prefill's time, the GEMMs and delta rule only 17 of 27 ms
            report.prefill_kernels[follow_label(prompt, follow)] = profiled(
                lambda rows=rows: engine.prefill(rows[0], sampling, 0), 2, top=40, before=before)
    span = engine._span(engine._rows + 2 * frames)
    with torch.inference_mode():
        report.kernels = profiled(lambda: engine.program.run("frame", span, sampling), frames)


def idle_profile(report: Report, engine, config, frames: int, overlap: int | None) -> None:
    """A stream of each benchmark prompt under the profiler, after the same stream unprofiled (which captures its
    codec windows' graphs): where the GPU idles (stream_idle)."""
    from torch.profiler import ProfilerActivity, profile

    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=overlap)
    for name, request in bench_requests(config, frames).items():
        measure_trial(engine, request, schedule)
        # CPU only on a dry run, where no device event comes
        with profile(activities=[ProfilerActivity.CUDA if torch.cuda.is_available() else ProfilerActivity.CPU]) as prof:
            measure_trial(engine, request, schedule)
        report.stream_idle[name] = stream_idle(device_events(prof))


def run_engine(name: str, described: list[str], files: dict[str, str], root: Path, weights, oracle, config, tol,
               args) -> tuple[Report, object | None]:
    """Build, check and time the decode of one engine; the engine comes back alive (None if it failed) for the
    interleaved stream trials."""
    report = Report(name, described)
    engine = None
    try:
        pkg = import_package(files, root, f"fast_check_{name}")
        before = torch.cuda.memory_allocated() if torch.cuda.is_available() else 0
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        engine = pkg.build_engine(config, weights, torch.device(args.device))
        sync()
        report.build_s = time.perf_counter() - t0
        report.correctness = check(engine, oracle, config, tol)
        report.stream_problems = stream_repeats(engine, config, args.frames, args.overlap_frames[-1])
        time_decode(report, engine, config, args.frames)
        codec_stages(report, engine, config)
        if hasattr(engine, "program") and engine.device.type == "cuda" and not args.no_profile:
            graph_stages(report, pkg, engine, config)
            kernel_profile(report, engine, config, follows=args.follow)
            idle_profile(report, engine, config, args.frames, args.overlap_frames[-1])  # the last one's stream
        if torch.cuda.is_available():  # the shared weights plus this engine's own peak, not the engines alive before
            report.peak_gib = (torch.cuda.max_memory_allocated() - before + weight_bytes(weights)) / 2**30
    except Exception as e:  # noqa: BLE001 - one engine's failure must not stop the others
        report.error = f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=8)
        engine = None
        release()
    return report, engine


def weight_bytes(weights) -> int:
    return sum(t.numel() * t.element_size() for t in weights.values())


def release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(reports: list[Report]) -> None:
    print(f"\n{'engine':<18} {'gate':<5} {'repeat':<6} {'max_err':>8} {'top1':>6} {'ms/frame':>9} {'wall':>7} "
          f"{'fps':>7} {'sync0':>5} {'peakGiB':>8}")
    for r in reports:
        gate = "-" if not r.correctness else ("ok" if not any(c.problems for c in r.correctness) else "FAIL")
        repeat = "-" if r.stream_problems is None else ("FAIL" if r.stream_problems else "ok")
        err = max((c.max_abs_err or 0.0 for c in r.correctness), default=None)
        top1 = min((c.top1 or 0.0 for c in r.correctness), default=None)
        print(f"{r.engine:<18} {gate:<5} {repeat:<6} {fmt(err, '8.4f')} {fmt(top1, '6.3f')} "
              f"{fmt(r.decode_ms_events, '9.3f')} {fmt(r.decode_ms_wall, '7.3f')} {fmt(r.decode_frames_per_s, '7.1f')} "
              f"{r.decode_sync_free!s:>5} {fmt(r.peak_gib, '8.1f')}")
        if r.frame_gb is not None:
            print(f"    reads {r.frame_gb:.2f} GB a frame: {r.decode_tb_per_s:.2f} TB/s at its decode step")
        for name, t in r.prompts.items():
            beyond = "" if t.beyond_decode_ms is None else f"  beyond decode {t.beyond_decode_ms:6.1f} ms"
            print(f"    {name:<10} prefill {t.prefill_ms:8.1f} ms  TTFA {t.ttfa_ms:8.1f} ms  "
                  f"{t.frames_per_s:7.1f} frames/s  RTF {t.rtf:.4f}{beyond}")
            if t.prefill_gb is not None:
                print(f"    {'':<10} prefill routes to {t.prefill_gb:6.2f} GB of weights: "
                      f"{t.prefill_gb / t.prefill_ms:.2f} TB/s over its wall")
            if t.ttfa_parts is not None:
                q = t.ttfa_parts
                print(f"    {'':<10} first chunk ms: build {q.build_ms:.2f}, copy {q.copy_ms:.2f}, prefill "
                      f"{q.prefill_ms:.2f}, between {q.between_ms:.2f}, codec {q.codec_ms:.2f}, handover "
                      f"{q.handover_ms:.2f} (in all {q.total_ms:.2f})")
        if r.stages_ms:
            print("    stages ms: " + ", ".join(f"{k}={v:.3f}" for k, v in r.stages_ms.items()))
        for kernel, ms, calls in r.kernels:
            print(f"    kernel {ms:7.3f} ms/frame {calls:6.0f} calls  {kernel[:90]}")
        for prompt, idle in r.stream_idle.items():
            if idle is not None:
                gaps = ", ".join(f"{ms:.2f} at {at:.1f}" for at, ms in idle.gaps)
                print(f"    {prompt} stream under the profiler: {idle.span_ms:.1f} ms on the GPU, busy "
                      f"{idle.busy_ms:.1f}, idle {idle.idle_ms:.1f} (largest gaps, ms at ms: {gaps}); by CUDA stream "
                      + ", ".join(f"{k} {v:.1f}" for k, v in idle.streams_ms.items())
                      + f"; streams overlapping {idle.overlap_ms:.1f}")
        for prompt, kernels in r.prefill_kernels.items():
            for kernel, ms, calls in kernels:
                print(f"    {prompt} prefill kernel {ms:7.3f} ms {calls:6.0f} calls  {kernel[:80]}")
        for c in r.correctness:
            for p in c.problems:
                print(f"    {c.prompt}: {p}")
        for p in r.stream_problems or []:
            print(f"    {p}")
        if r.error:
            print(f"    ERROR: {r.error}")


def follows_arg(text: str) -> tuple[str, ...]:
    follows = tuple(f for f in text.split(",") if f)
    if not follows or any(f not in FOLLOWS for f in follows):
        raise argparse.ArgumentTypeError(f"takes {' and/or '.join(FOLLOWS)}, comma-separated, got {text!r}")
    return follows


def overlaps_arg(text: str) -> tuple[int | None, ...]:
    try:
        return tuple(None if o == "none" else int(o) for o in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes 'none' or frame counts, comma-separated, got {text!r}") from None


def main() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_REPRODUCIBLE)  # as the evaluator's workers run
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON results path")
    parser.add_argument("--engines", default="graph_triton,graph,graph_h5moe,graph_unfused",
                        help=f"of {sorted(RECIPES)}")
    parser.add_argument("--frames", type=int, default=200, help="frames per timed decode run and stream trial")
    parser.add_argument("--trials", type=int, default=3, help="timed stream trials per engine (after one warm-up)")
    parser.add_argument("--overlap-frames", default="none", type=overlaps_arg,
                        help="codec left context of the streams' later chunks, comma-separated, each timed: 'none' "
                             "(the whole history, as the targets' default) or frames (SGLang-Omni: 32)")
    parser.add_argument("--follow", default="rotation", type=follows_arg,
                        help="what each timed (and profiled) prefill follows, comma-separated, each timed: "
                             "'rotation' (the default: the previous prompt's, every call with fresh voice reference "
                             "codes, as the evaluator's trials; a prefix cache then reuses only what the two share; "
                             "such prompts' names end in /rotation) or 'self' (the same request's prefill: an in-run "
                             "prefix cache's best case, a repeated voice)")
    parser.add_argument("--reference-frames", type=int, default=16, help="the eager reference is slow: fewer frames")
    parser.add_argument("--budget-s", type=float, default=330,
                        help="start no engine after the first one once this many seconds have passed since the "
                             "start (the full-size reference part alone takes ~110 s on an H200)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the eager reference (~1-2 minutes at full size) and so the gate (reads '-'): a "
                             "timing probe of changes that cannot alter outputs, such as a stream priority")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the per-stage graphs and the kernel profiles (~20-40 s an engine): a short lease")
    parser.add_argument("--plus-only", action="store_true",
                        help="with --kept-plus: build only the extended engines, not the kept one as well (a lease "
                             "too short for both; its figures are in an earlier run)")
    parser.add_argument("--config", default="drama3", help="model config (drama3-tiny for a dry run)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--kept", help="also check a kept engine of $SWARM_HOME's knowledge base: an id or 'best'")
    parser.add_argument("--kept-plus", action="append", default=[],
                        help="with --kept, also that engine with these applied on top, comma-separated: a transform "
                             "(its first variant) or renew:<transform> (today's kernel files), in order; given again, "
                             "another such engine (kept_plus2, ...), so that a stack and its parts are timed together; "
                             f"'{LEAP_ITEM}' first: the offline proposer's next leap on the kept engine (as the swarm "
                             "would propose it on resuming the run that kept it), then the rest")
    args = parser.parse_args()
    names = [e for e in args.engines.split(",") if e]
    unknown = [e for e in names if e not in RECIPES]
    if unknown:
        sys.exit(f"unknown engines {unknown} (known: {sorted(RECIPES)})")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: pass --device cpu --config drama3-tiny for a dry run")
    started, device, config = time.perf_counter(), torch.device(args.device), get_config(args.config)
    stacks = [[p for p in stack.split(",") if p] for stack in args.kept_plus]
    if stacks and not args.kept:
        sys.exit("--kept-plus needs --kept")
    if args.plus_only and not stacks:
        sys.exit("--plus-only needs --kept-plus")
    kept = []  # resolved before the reference's minutes, so that a wrong id or transform fails at once
    if args.kept:
        record = kept_record(args.kept, config.name)
        title, kept_files = title_and_files(record)
        if not args.plus_only:
            kept.append(("kept", [title], lambda: kept_files))
        for i, plus in enumerate(stacks):
            labels, plus_engine = kept_stack(record, kept_files, plus)
            kept.append((f"kept_plus{i + 1 if i else ''}", [title, *labels], lambda files=plus_engine: files))
    tol = load_target(REPO / "targets" / "drama3_h200.yaml").tolerances
    weights = init_weights(config, seed=0, device=device)
    sync()
    header = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "config": config.name,
              "weights_gib": weight_bytes(weights) / 2**30,
              "weights_s": time.perf_counter() - started}
    print(header, flush=True)
    oracle, reports = {}, []
    if not args.no_reference:
        ref = build_engine(config, weights, device)
        requests = bench_requests(config, FORCED_FRAMES)
        for prompt in FORCED_PROMPTS:
            rows = build_rows(config, requests[prompt], ref.tokenizer)
            frames = ref.generate(requests[prompt]).frames
            oracle[prompt] = (requests[prompt], rows, frames, teacher_forced(ref, rows, frames))
        reports.append(Report("reference", []))
        time_decode(reports[0], ref, config, args.reference_frames)
        time_streams([(reports[0], ref)], config, args.reference_frames, 1)
        codec_stages(reports[0], ref, config)
        if torch.cuda.is_available():
            reports[0].peak_gib = torch.cuda.max_memory_allocated() / 2**30
        del ref
        release()
    root = package_root("fast_check_")
    engines = [(name, [f"{t}({', '.join(f'{k}={v}' for k, v in o.items())})" for t, o in RECIPES[name]],
                lambda name=name: recipe_files(RECIPES[name])) for name in names]
    engines[:0] = kept
    alive: list[tuple[Report, object]] = []
    for i, (name, described, files) in enumerate(engines):
        if i and time.perf_counter() - started > args.budget_s:
            reports.append(Report(name, described, error=f"skipped: past the {args.budget_s:.0f} s budget"))
            continue
        print(f"--- {name} ({time.perf_counter() - started:.0f} s)", flush=True)
        report, engine = run_engine(name, described, files(), root, weights, oracle, config, tol, args)
        reports.append(report)
        if engine is not None:
            alive.append((report, engine))
        Path(args.out).write_text(json.dumps(header | {"reports": [asdict(r) for r in reports]}, indent=1))
        print_table(reports[-1:])
    print(f"--- streams of {', '.join(r.engine for r, _ in alive)}, interleaved "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    time_streams(alive, config, args.frames, args.trials, args.overlap_frames, args.follow)
    alive.clear()
    release()
    print_table(reports)
    Path(args.out).write_text(json.dumps(header | {"reports": [asdict(r) for r in reports],
                                                   "total_s": time.perf_counter() - started}, indent=1))


if __name__ == "__main__":
    main()
