"""reference_runtime.bench: the per-trial measurement and the CLI on drama3-tiny for a couple of trials."""
from __future__ import annotations

import json

import pytest

from reference_runtime.api import StreamSchedule
from reference_runtime.bench import Percentiles, bench_requests, main, measure_trial
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")


def test_percentiles():
    values = [float(v) for v in range(1, 101)]
    p = Percentiles.of(values)
    assert p.p50 == pytest.approx(50.5) and p.p95 == pytest.approx(95.05)
    assert Percentiles.of(values, higher_is_better=True).p95 == pytest.approx(5.95)
    assert Percentiles.of([3.0]) == Percentiles(3.0, 3.0)


def test_bench_prompts_include_a_3_9_second_voice_reference():
    requests = bench_requests(CFG, frames=5)
    assert set(requests) == {"hello", "sentences", "voice"}
    assert all(r.ignore_eos and r.max_frames == 5 for r in requests.values())
    assert requests["voice"].references[0].codes.shape == (CFG.num_codebooks, 84)


def test_measure_trial_times_a_fixed_amount_of_audio():
    engine = build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")
    trial = measure_trial(engine, bench_requests(CFG, frames=6)["hello"], StreamSchedule(first_chunk_frames=1))
    assert trial.num_frames == 6
    assert trial.audio_s == pytest.approx(6 * CFG.codec.frame_samples / CFG.codec.sample_rate)
    assert 0 < trial.ttfa_ms < trial.total_s * 1e3
    assert trial.frames_per_s == pytest.approx(6 / trial.total_s)
    assert trial.rtf == pytest.approx(trial.total_s / trial.audio_s)


def test_cli_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    results = main(["--config", "drama3-tiny", "--device", "cpu", "--frames", "3", "--trials", "2",
                    "--warmup", "1", "--json", str(out)])
    table = capsys.readouterr().out
    assert "TTFA ms p50" in table and "voice" in table
    saved = json.loads(out.read_text())
    assert [r["name"] for r in saved] == ["hello", "sentences", "voice"]
    assert all(len(r["trials"]) == 2 and r["peak_gpu_mem_gib"] is None for r in saved)
    assert results[2].prompt_rows > results[0].prompt_rows  # the reference's 84 frames are in the prompt
