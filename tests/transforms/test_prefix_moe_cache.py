"""prefix_moe_cache on CPU at drama3-tiny, on the graphed prefill run eagerly (as its graphs replay it): a prompt
that shares its system turn with the previous one gets the teacher-forced logits of the stack without the cache,
the shared rows' routed outputs do come from the cache (corrupting it moves the logits), a prompt sharing nothing
reuses nothing, the user's text is never reused, however much of it the previous prompt shared, and a stream after
generate gives generate's sampled frames (the evaluator demands it)."""
from __future__ import annotations

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from knowledge_base.transforms.triton_prefill_route import triton_prefill_route
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed
from test_prefill_row_ladder import STACK as GRAPHED_PREFILL

STACK = [*GRAPHED_PREFILL, triton_prefill_route]  # the graphed prefill (run eagerly on CPU), then its routing
TEXTS = ("Hello there", "The quick brown fox")  # both start with the same system turn


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root, files = tmp_path_factory.mktemp("prefix"), transformed(engine_files(REFERENCE), STACK)
    weights = init_weights(CFG, seed=0, device="cpu")
    return [load(f, root).build_engine(CFG, weights, "cpu") for f in (files, transformed(files, [prefix_moe_cache]))]


def _prompt(engine, text: str) -> tuple[torch.Tensor, torch.Tensor]:
    request = TTSRequest(text=text, max_frames=3, ignore_eos=True, sampling=GREEDY, seed=0)
    return build_rows(CFG, request, engine.tokenizer), engine.generate(request).frames


def system_rows(rows: torch.Tensor) -> int:
    """The prompt's system-turn rows, through its first <|im_end|>: all a prefix cache may reuse."""
    return int((rows[:, 0] == CFG.eos_token_id).long().cumsum(0).eq(0).sum()) + 1


def test_applies_once_on_top_of_the_graphed_prefill_and_its_routing():
    assert_applies_once_on_top_of(prefix_moe_cache, STACK)
    with pytest.raises(NotApplicable):  # the rows it reuses are those the routing kernel can send nowhere
        prefix_moe_cache.apply(transformed(engine_files(REFERENCE), STACK[:-1]), {"prefix_rows": 256})


def test_a_shared_system_turn_gives_the_uncached_logits(engines):
    plain, cached = engines
    first, second = (_prompt(plain, text) for text in TEXTS)
    shared = int((first[0][:len(second[0])] == second[0][:len(first[0])]).all(1).long().cumprod(0).sum())
    assert shared >= 20
    for rows, frames in (first, second):
        want, got = teacher_forced(plain, rows, frames), teacher_forced(cached, rows, frames)
        torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
    assert int(cached.prefill_graphs.program.last_length) == len(second[0])


def test_the_shared_rows_come_from_the_cache(engines):
    _, cached = engines
    first, second = (_prompt(cached, text) for text in TEXTS)
    teacher_forced(cached, *first)
    want = teacher_forced(cached, *second)
    teacher_forced(cached, *first)
    for layer in cached.model.backbone.layers:
        layer.moe.cached[:8] += 1.0  # within the shared rows: only the cache can carry this into the logits
    got = teacher_forced(cached, *second)
    assert not torch.allclose(got.main, want.main, atol=1e-3)


def test_a_prompt_sharing_nothing_reuses_nothing(engines):
    plain, cached = engines
    rows, frames = _prompt(cached, TEXTS[0])
    teacher_forced(cached, rows, frames)
    other = rows.clone()
    other[0, 0] += 1  # a different first row: no leading row in common
    for layer in cached.model.backbone.layers:
        layer.moe.cached += 1.0  # were any row reused, this would show
    want, got = teacher_forced(plain, other, frames), teacher_forced(cached, other, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)


def test_the_users_text_is_never_reused(engines):
    plain, cached = engines
    rows, frames = _prompt(cached, "Hello there my friend")
    system = system_rows(rows)
    teacher_forced(cached, rows, frames)
    for layer in cached.model.backbone.layers:
        layer.moe.cached[system:] += 1.0  # the rows past the system turn, which the same prompt shares in full
    want, got = teacher_forced(plain, rows, frames), teacher_forced(cached, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
    assert 20 <= system < len(rows) - 4


def test_a_stream_after_generate_samples_the_same_frames(tmp_path):
    """The evaluator's order: another prompt, then generate, then the same request streamed. Generate reused the
    other prompt's system-turn outputs (TEXTS share their system turn: test_the_shared_rows_come_from_the_cache);
    the stream reuses what generate used, so its sampled frames are generate's, not a rounding away from them."""
    files = transformed(transformed(engine_files(REFERENCE), STACK), [prefix_moe_cache])
    cached = load(files, tmp_path).build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")
    other, request = (TTSRequest(text=text, max_frames=12, ignore_eos=True, sampling=SamplingParams(), seed=7)
                      for text in TEXTS)
    cached.generate(other)
    want = cached.generate(request).frames
    chunks = list(cached.stream(request, StreamSchedule(first_chunk_frames=1, overlap_frames=4)))
    assert torch.equal(torch.cat([c.frames for c in chunks]), want)
