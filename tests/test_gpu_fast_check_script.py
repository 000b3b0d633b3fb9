"""scripts/gpu_fast_check.py stays runnable: a CPU dry run checks a kept engine of a knowledge base (--kept), its
streams timed under two codec overlaps."""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from candidates import EngineRepo
from candidates.repo import engine_files
from knowledge_base import REFERENCE_ID, EngineKey, Figures, KeptEngine, KnowledgeStore, LessonRecord
from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import StreamSchedule
from reference_runtime.bench import bench_requests
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model import engine as engine_module
from reference_runtime.prompt import build_rows
from reference_runtime.tokenizer import load_tokenizer
from reference_runtime.weights import init_weights
from targets.schema import load_target
from tests.kb.test_kb_store import _candidate, _lesson, _run, _verdict

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_fast_check.py"


def _kept_home(home: Path, target_json: str = "{}") -> str:
    """A $SWARM_HOME whose knowledge base keeps one CUDA engine for drama3-tiny (the reference's files), from a run
    of the target `target_json`."""
    repo = EngineRepo(home / "engines")
    reference = repo.reference_commit(REPO / "reference_runtime" / "model")
    kb = KnowledgeStore(home / "kb.sqlite")
    run = _run(kb, target_json=target_json)
    candidate = kb.add_candidate(_candidate(run, 0))
    sha = repo.commit_candidate(reference, engine_files(REPO / "reference_runtime" / "model"),
                                candidate_id=candidate.id, message="same files")
    key = EngineKey(run.engine_key.architecture, "drama3-tiny", "cuda", "h200", "2.11.0", "3.6.0", "13.0")
    kb.record_outcome(replace(_verdict(candidate.id), verdict_json=""), _lesson(run, candidate.id),  # no profile
                      KeptEngine(id=candidate.id, run_id=run.id, parent_id=REFERENCE_ID, git_commit=sha, key=key,
                                 figures=Figures(100.0, 10.0, 0.1, 1.2), speedup_vs_reference=1.2, title="same"))
    kb.close()
    return candidate.id


def test_dry_run_checks_the_best_kept_engine(tmp_path):
    kept_id = _kept_home(tmp_path / "home")
    out = tmp_path / "fc.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--config", "drama3-tiny", "--device", "cpu",
                           "--frames", "4", "--trials", "1", "--engines", "", "--kept", "best",
                           "--kept-plus", "deltanet_conv_unfold", "--kept-plus", "deltanet_conv_unfold,rope_tables",
                           "--overlap-frames", "none,2"],
                          env=os.environ | {"SWARM_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    reports = {r["engine"]: r for r in json.loads(out.read_text())["reports"]}
    assert sorted(reports) == ["kept", "kept_plus", "kept_plus2", "reference"]
    assert reports["kept"]["transforms"] == [f"{kept_id}: same"]
    assert reports["kept_plus"]["transforms"] == [f"{kept_id}: same", "deltanet_conv_unfold"]
    assert reports["kept_plus2"]["transforms"] == [f"{kept_id}: same", "deltanet_conv_unfold", "rope_tables"]
    for kept in (reports["kept"], reports["kept_plus"], reports["kept_plus2"]):
        assert kept["error"] is None and kept["stream_problems"] == []
        assert kept["correctness"] and not any(c["problems"] for c in kept["correctness"])
        assert sorted(kept["prompts"]) == sorted(f"{p}/rotation" for p in (
            "hello", "hello/overlap2", "sentences", "sentences/overlap2", "voice", "voice/overlap2"))


@pytest.mark.parametrize("item, message", [
    ("renew:triton_prefill_moe", "renew:triton_prefill_moe: the engine has today's files"),
    ("triton_code_heads", "triton_code_heads: triton_code_heads: apply triton_tower and triton_sampling first"),
    ("retune:triton_deltanet:block_v=32", "retune:triton_deltanet:block_v=32: the engine lacks the transform's params")])
def test_a_change_the_kept_engine_cannot_take_is_a_clear_error(tmp_path, item, message):
    _kept_home(tmp_path / "home")
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json"), "--config", "drama3-tiny",
                           "--device", "cpu", "--engines", "", "--kept", "best", "--kept-plus", item],
                          env=os.environ | {"SWARM_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1 and f"--kept-plus: {message}" in done.stderr, done.stderr[-2000:]


def test_no_kept_engine_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json"), "--config", "drama3-tiny",
                           "--device", "cpu", "--engines", "", "--kept", "best"],
                          env=os.environ | {"SWARM_HOME": str(tmp_path / "empty")}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1 and "no kept CUDA engine for drama3-tiny" in done.stderr


def test_kept_plus_retunes_one_knob_of_an_applied_transform(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    deltanet = TRANSFORMS["triton_deltanet"]
    files = fast_check.recipe_files((("triton_deltanet", {}),))
    retuned = fast_check.plus_files(files, ["retune:triton_deltanet:block_v=32"])
    changed = [path for path in files if retuned[path] != files[path]]
    assert changed == [deltanet.knobs.path]
    assert f"{deltanet.knobs.constant('block_v')} = 32" in retuned[deltanet.knobs.path]
    with pytest.raises(SystemExit, match="block_v=16 is its current value or outside its space"):
        fast_check.plus_files(files, ["retune:triton_deltanet:block_v=16"])


def test_kept_plus_leap_is_the_offline_proposers_next_leap(tmp_path, monkeypatch):
    """`leap` stacks what the offline proposer would leap to next on the kept engine, from the context the swarm
    builds for the run that kept it; once that leap has a lesson on the engine, there is none, and the script says
    so instead of timing something else."""
    target = load_target(REPO / "targets" / "drama3_h200_lease.yaml")
    kept_id = _kept_home(tmp_path / "home", target.model_dump_json())
    monkeypatch.setenv("SWARM_HOME", str(tmp_path / "home"))
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    record = fast_check.kept_record(kept_id, "drama3-tiny")
    _, files = fast_check.title_and_files(record)
    title, leapt = fast_check.offline_leap(record, files)
    named = re.findall(r"(\w+)\(", title)
    assert title.startswith("leap: ") and len(named) >= 2 and all("cuda" in TRANSFORMS[n].proven for n in named)
    assert leapt != files
    kb = KnowledgeStore(tmp_path / "home" / "kb.sqlite")
    kb.add_lesson(LessonRecord(run_id=record.run_id, candidate_id=kept_id, feature="fp8_moe", outcome="failed",
                               summary=f"{title} on {kept_id}: slower: not faster",
                               architecture=record.key.architecture))
    kb.close()
    with pytest.raises(SystemExit, match="no leap on"):
        fast_check.offline_leap(record, files)


def test_no_reference_times_the_kept_engine_without_a_gate(tmp_path):
    _kept_home(tmp_path / "home")
    out = tmp_path / "fc.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--config", "drama3-tiny", "--device", "cpu",
                           "--frames", "3", "--trials", "1", "--engines", "", "--kept", "best", "--no-reference"],
                          env=os.environ | {"SWARM_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    reports = json.loads(out.read_text())["reports"]
    assert [r["engine"] for r in reports] == ["kept"]
    assert reports[0]["correctness"] == [] and reports[0]["error"] is None
    assert reports[0]["decode_ms_wall"] > 0 and sorted(reports[0]["prompts"]) == [f"{p}/rotation" for p in (
        "hello", "sentences", "voice")]
    assert reports[0]["decode_tb_per_s"] == pytest.approx(reports[0]["frame_gb"] / reports[0]["decode_ms_events"])
    assert "GB a frame:" in done.stdout and "beyond decode" in done.stdout
    assert all(p["beyond_decode_ms"] is not None for p in reports[0]["prompts"].values())
    assert all(p["ttfa_parts"]["prefill_ms"] > 0 for p in reports[0]["prompts"].values())
    assert "first chunk ms: build" in done.stdout


class _Recorder:
    """An engine that only records which prompt (by its row count) each prefill took, and the rows themselves."""

    device = torch.device("cpu")

    def __init__(self, tokenizer, log: list[tuple[str, int]], seen: list[tuple[int, bytes]]):
        self.tokenizer, self.log, self.seen = tokenizer, log, seen

    def prefill(self, rows, sampling, seed):
        self.log.append(("prefill", rows.shape[0]))
        self.seen.append((rows.shape[0], rows.numpy().tobytes()))

    # the decode frame that kernel_profile profiles after the prefills
    _rows = 0

    def _span(self, rows):
        return rows

    @property
    def program(self):
        return SimpleNamespace(run=lambda stage, span, sampling: self.log.append((stage, span)))


def _assert_voices(follows: tuple[str, ...], voice_rows: int, seen: list[tuple[int, bytes]]) -> None:
    """Each voice prompt the engine saw: one fixed voice when timed after itself; in the rotation a fresh reference
    on every call, as the evaluator's trials (a repeated one would time a prefix-cache hit the judge never sees)."""
    voices = [rows for n, rows in seen if n == voice_rows]
    assert len(set(voices)) == (len(voices) if follows == ("rotation",) else 1)


@pytest.mark.parametrize("follows", [("self",), ("rotation",)])
def test_each_timed_prompt_follows_itself_or_the_previous_prompt(monkeypatch, follows):
    """What an in-run prefix cache holds when a prompt is timed: by default the same request's rows (its best case);
    with --follow rotation the previous prompt's, every voice reference fresh, as in the evaluator's trials."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    tokenizer = load_tokenizer(config)
    rows = {name: build_rows(config, r, tokenizer).shape[0] for name, r in bench_requests(config, 2).items()}
    assert len(set(rows.values())) == len(rows)  # a prompt is known by its row count
    log: list[tuple[str, int]] = []
    seen: list[tuple[int, bytes]] = []

    def stream(what: str, request):
        built = build_rows(config, request, tokenizer)
        log.append((what, built.shape[0]))
        seen.append((built.shape[0], built.numpy().tobytes()))

    monkeypatch.setattr(fast_check, "measure_trial", lambda engine, request, schedule: stream("stream", request) or
                        SimpleNamespace(ttfa_ms=1.0, frames_per_s=1.0, rtf=1.0, total_s=1.0, num_frames=2))
    monkeypatch.setattr(fast_check, "ttfa_parts", lambda engine, request, schedule: stream("parts", request) or
                        fast_check.TtfaParts(*[1.0] * 7))
    report = fast_check.Report("recorder", [])
    fast_check.time_streams([(report, _Recorder(tokenizer, log, seen))], config, 2, 2, follows=follows)
    names, expected = list(rows), []
    assert report.error is None and sorted(report.prompts) == sorted(
        name if follow == "self" else f"{name}/rotation" for follow in follows for name in names)
    for follow in follows:
        for i, name in enumerate(names):
            first = [("prefill", rows[names[i - 1]])] if follow == "rotation" else []
            expected += [*first, ("stream", rows[name])]  # the warm-up
            for _ in range(2):  # each timed trial: its prefill, its stream, then a first chunk cut in parts
                expected += [*first, ("prefill", rows[name]), *first, ("stream", rows[name]), *first,
                             ("parts", rows[name])]
    assert log == expected
    _assert_voices(follows, rows["voice"], seen)


def test_engines_of_one_trial_get_the_same_fresh_voice(monkeypatch):
    """In the rotation the voice is fresh per trial, not per engine: engines compared in one trial take one input."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    tokenizer = load_tokenizer(config)
    monkeypatch.setattr(fast_check, "measure_trial", lambda engine, request, schedule: SimpleNamespace(
        ttfa_ms=1.0, frames_per_s=1.0, rtf=1.0, total_s=1.0, num_frames=2))
    monkeypatch.setattr(fast_check, "ttfa_parts", lambda engine, request, schedule: fast_check.TtfaParts(*[1.0] * 7))
    seen = [[], []]
    engines = [(fast_check.Report(f"e{i}", []), _Recorder(tokenizer, [], seen[i])) for i in range(2)]
    fast_check.time_streams(engines, config, 2, 2, follows=("rotation",))
    assert seen[0] and sorted(seen[0]) == sorted(seen[1])


@pytest.mark.parametrize("follows", [("self",), ("rotation",)])
def test_the_prefill_profiles_follow_the_prompt_the_timings_follow(monkeypatch, follows):
    """The per-kernel breakdown of a prefill is of the same case as its timings: in the rotation each profiled
    prefill (the warm one included) comes after the previous prompt's, unprofiled, every call with a fresh voice."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    tokenizer = load_tokenizer(config)
    rows = {name: build_rows(config, r, tokenizer).shape[0] for name, r in bench_requests(config, 1).items()}
    log: list[tuple[str, int]] = []
    seen: list[tuple[int, bytes]] = []
    report = fast_check.Report("recorder", [])
    fast_check.kernel_profile(report, _Recorder(tokenizer, log, seen), config, frames=2, follows=follows)
    expected = []
    for follow in follows:
        for prompt, previous in (("voice", "sentences"), ("hello", "voice")):
            first = [("prefill", rows[previous])] if follow == "rotation" else []
            expected += [*first, ("prefill", rows[prompt])] * 3  # the warm call, then 2 profiled
    assert log == expected + [("frame", 4)] * 3
    assert sorted(report.prefill_kernels) == sorted(fast_check.follow_label(prompt, follow)
                                                    for follow in follows for prompt in ("voice", "hello"))
    _assert_voices(follows, rows["voice"], seen)


def test_follow_takes_self_and_rotation_only():
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", "x.json", "--follow", "self,previous"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "takes self and/or rotation" in done.stderr


def test_ttfa_parts_cut_a_real_first_chunk(monkeypatch):
    """The first chunk of a real engine's stream, cut at its prompt builder, prefill and codec calls: the parts add
    up to the whole, and the engine keeps its own methods and builder afterwards."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    engine = build_engine(config, init_weights(config, seed=0, device="cpu"), "cpu")
    request = bench_requests(config, 4)["voice"]
    parts = fast_check.ttfa_parts(engine, request, StreamSchedule(first_chunk_frames=1))
    cut = [parts.build_ms, parts.copy_ms, parts.prefill_ms, parts.between_ms, parts.codec_ms, parts.handover_ms]
    assert all(x >= 0 for x in cut) and sum(cut) == pytest.approx(parts.total_ms)
    assert parts.build_ms > 0 and parts.prefill_ms > 0 and parts.codec_ms > 0
    assert "prefill" not in vars(engine) and "decode_audio" not in vars(engine)
    assert engine_module.build_rows is build_rows  # the builder the engine calls is the real one again
    first = next(engine.stream(request, StreamSchedule(first_chunk_frames=1)))  # the stream still works
    assert first.frame_end == 1


def test_ttfa_parts_is_none_for_a_first_chunk_without_a_codec_call(monkeypatch):
    """An engine whose first chunk skips decode_audio gets no parts, not an error that would drop its timings."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")

    class Direct:
        def prefill(self, rows, sampling, seed):
            pass

        def decode_audio(self, codes):
            raise AssertionError("not called on this path")

        def stream(self, request, schedule):
            self.prefill(None, None, 0)
            yield "chunk"

    assert fast_check.ttfa_parts(Direct(), None, None) is None


def test_idle_profile_runs_each_prompt_under_the_profiler(monkeypatch):
    """On CPU the profiler sees no device events, so each prompt's entry is None; on CUDA the same calls fill it."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    engine = build_engine(config, init_weights(config, seed=0, device="cpu"), "cpu")
    report = fast_check.Report("tiny", [])
    fast_check.idle_profile(report, engine, config, 3, 2)
    assert report.stream_idle == {"hello": None, "sentences": None, "voice": None}


def test_stream_repeats_finds_a_stream_that_parts_from_generate(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    fast_check = importlib.import_module("gpu_fast_check")
    config = get_config("drama3-tiny")
    engine = build_engine(config, init_weights(config, seed=0, device="cpu"), "cpu")
    assert fast_check.stream_repeats(engine, config, 6, 2) == []
    honest = engine.stream
    calls = []

    def racing(request, schedule):  # the second stream's frames part from frame 4 on
        calls.append(request)
        chunks = list(honest(request, schedule))
        if len(calls) == 2:
            frames = torch.cat([c.frames for c in chunks])
            frames[4:, 1] = (frames[4:, 1] + 1) % config.codebook_size
            chunks = [replace(chunks[0], frames=frames)]
        return iter(chunks)

    monkeypatch.setattr(engine, "stream", racing)
    problems = fast_check.stream_repeats(engine, config, 6, 2)
    assert len(problems) == 1 and problems[0].startswith("stream 2 of 2 differs from generate from frame 4"), problems
