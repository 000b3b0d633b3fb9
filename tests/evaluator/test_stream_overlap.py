"""Targets whose streams re-decode only a window of left context (benchmark.stream_overlap_frames, as
SGLang-Omni's 32): the judge's expected stream audio is each chunk's window decoded and cut to the chunk, honest
engines pass the correctness cascade and the benchmark's audits, and a stream that cheats is still caught."""
from __future__ import annotations

import pytest
import torch

from evaluator import Status, evaluate
from evaluator.correctness import stream_check_frames
from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from evaluator.streams import stream_audio, stream_schedule
from reference_runtime.api import StreamSchedule, TTSRequest, frame_codes
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights
from targets.schema import TargetError, load_target
from tests.exploits.cheaters import cheater, exploit_target, judge

CFG = get_config("drama3-tiny")


def _overlap(target, frames: int):
    return target.model_copy(update={"benchmark": target.benchmark.model_copy(
        update={"stream_overlap_frames": frames})})


@pytest.fixture(scope="module")
def engine():
    return build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")


def test_the_expected_audio_is_what_an_honest_windowed_stream_carries(engine, tiny_target):
    schedule = stream_schedule(_overlap(tiny_target, 2).benchmark)
    request = TTSRequest(text="Hello there", max_frames=12, ignore_eos=True, seed=3)
    chunks = list(engine.stream(request, schedule))
    frames = torch.cat([c.frames for c in chunks])
    got = torch.cat([c.audio for c in chunks])
    spf = CFG.codec.frame_samples
    assert torch.equal(stream_audio(engine.decode_audio, frames, schedule, spf), got)
    whole = engine.decode_audio(frame_codes(frames))
    # the windows' audio is not the whole utterance's, so the judge must not compare it with that
    assert (whole - got).abs().max() > tiny_target.tolerances.stream_max_abs
    assert torch.equal(stream_audio(engine.decode_audio, frames, stream_schedule(tiny_target.benchmark), spf), whole)


def test_a_decode_without_a_waveform_gives_none(engine, tiny_target):
    schedule = stream_schedule(_overlap(tiny_target, 2).benchmark)
    frames = torch.zeros((12, 11), dtype=torch.long)
    assert stream_audio(lambda codes: None, frames, schedule, CFG.codec.frame_samples) is None


def test_the_reference_passes_with_overlapped_windows(tiny_target, tmp_path):
    verdict = evaluate(REFERENCE_DIR, _overlap(tiny_target, 0), baseline_dir=REFERENCE_DIR,
                       work_dir=tmp_path / "work", secret_seed=5)
    assert verdict.status.is_correct and verdict.comparison is not None, verdict.summary


def test_a_silent_first_chunk_is_caught_with_overlapped_windows(tmp_path):
    verdict = judge(cheater(tmp_path, "SilentStart"), _overlap(exploit_target(), 0), tmp_path)
    assert verdict.status == Status.MISMATCH, verdict.summary
    assert verdict.evidence[0].check == "stream" and "waveforms differ" in verdict.evidence[0].message


@pytest.mark.parametrize("overlap, check", [(None, "stream"), (0, "generate")])
def test_generate_audio_that_is_not_the_decode_is_caught(overlap, check, tmp_path):
    """With the whole history a stream must equal generate's audio; with windows generate's audio is held to the
    whole decode directly."""
    verdict = judge(cheater(tmp_path, "SilentGenerate"), _overlap(exploit_target(), overlap), tmp_path)
    assert verdict.status == Status.MISMATCH, verdict.summary
    assert verdict.evidence[0].check == check and "waveforms differ" in verdict.evidence[0].message


def test_a_negative_overlap_is_a_located_target_error(tmp_path):
    path = tmp_path / "t.yaml"
    text = (REPO_ROOT / "targets" / "drama3_cpu.yaml").read_text()
    path.write_text(text.replace("  first_chunk_frames: 1\n", "  first_chunk_frames: 1\n  stream_overlap_frames: -1\n"))
    with pytest.raises(TargetError, match=r"benchmark\.stream_overlap_frames"):
        load_target(path)


@pytest.mark.parametrize("forced, timed, window_ends, want", [
    (8, 64, (10, 20, 32, 64), 64),  # the lease target: a timed trial's length
    (32, 200, (10, 20, 32, 64), 65),  # past the last growing window, so its codec work runs beside a frame
    (3, 5, (10, 20, 32, 64), 5),
    (12, 24, (), 12),  # no growing windows: the first chunk alone, and the gate's frames are more
])
def test_the_stream_check_runs_past_every_growing_window(forced, timed, window_ends, want):
    schedule = StreamSchedule(first_chunk_frames=1, window_ends=window_ends, overlap_frames=32)
    assert stream_check_frames(forced, timed, schedule) == want
