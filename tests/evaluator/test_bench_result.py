"""Per-engine figures from timed trials: percentiles per prompt, the workers' peak memory, and the paired-ratio
spread that the speed decision uses."""
from __future__ import annotations

import torch

from evaluator.benchmark import Trial, bench_result, first_audio_gain, paired
from evaluator.streams import Chunk, StreamRun
from reference_runtime.api import TTSRequest


def _trial(engine: str, pair: int, prompt: str, seconds: float, peak: float | None) -> Trial:
    run = StreamRun(sent=0.0, chunks=[Chunk(torch.zeros(4), 0, 10, None, seconds)], worker_s=seconds,
                    device_s=None, peak_gib=peak)
    return Trial(engine=engine, pair=pair, prompt=prompt, timed=True,
                 request=TTSRequest(text="x", max_frames=10, ignore_eos=True), run=run, ttfa_s=0.1, audio_s=1.0)


def test_peak_memory_is_the_largest_reported_and_absent_on_cpu():
    trials = [_trial("candidate", 0, "hello", 1.0, 40.5), _trial("candidate", 1, "voice", 2.0, 41.25)]
    result = bench_result("candidate", trials)
    assert result.peak_memory_gib == 41.25 and [p.prompt for p in result.prompts] == ["hello", "voice"]
    assert bench_result("baseline", [_trial("baseline", 0, "hello", 1.0, None)]).peak_memory_gib is None


def test_spread_is_that_of_the_paired_ratios_not_of_each_engine():
    # inputs of very different lengths move both engines together: the ratio is steady, so no spread
    trials = [t for pair, seconds in enumerate((1.0, 3.0, 1.5, 2.5))
              for t in (_trial("baseline", pair, "hello", seconds, None),
                        _trial("candidate", pair, "hello", seconds / 2, None))]
    assert paired(trials).spread == 0.0 and paired(trials).ratios == [2.0] * 4
    assert paired(trials, first_audio_gain).ratios == [1.0] * 4  # both engines' trials take 0.1 s to first audio
