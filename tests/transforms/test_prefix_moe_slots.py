"""prefix_moe_slots on CPU at drama3-tiny, on the graphed prefill run eagerly (as its graphs replay it): in the
benchmark's rotation (hello, sentences, voice, then again) every prompt gets the teacher-forced logits of the stack
without any cache; the voice prompt after the others reuses its own reference rows from its slot (corrupting that
slot moves the logits, corrupting the others does not); with every slot taken by other system turns, the least
recently used one is replaced; and a stream after generate gives generate's sampled frames."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.prefix_moe_cache import prefix_moe_cache
from knowledge_base.transforms.prefix_moe_slots import prefix_moe_slots
from reference_runtime.api import SamplingParams, StreamSchedule
from reference_runtime.bench import bench_requests
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed
from test_prefix_moe_cache import STACK as UNCACHED
from test_prefix_moe_cache import system_rows

STACK = [*UNCACHED, prefix_moe_cache]
ROTATION = ("hello", "sentences", "voice")


def _slots_files(slots: int | None = None) -> dict[str, str]:
    """The stack with prefix_moe_slots' first variant, or `slots` where a test says."""
    base = transformed(engine_files(REFERENCE), STACK)
    params = next(prefix_moe_slots.variants()) | ({} if slots is None else {"slots": slots})
    return apply_edits(base, patch_edits(prefix_moe_slots.apply(base, params)))


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("slots")
    weights = init_weights(CFG, seed=0, device="cpu")
    return [load(f, root).build_engine(CFG, weights, "cpu")
            for f in (transformed(engine_files(REFERENCE), UNCACHED), _slots_files())]


@pytest.fixture(scope="module")
def prompts(engines):
    """name -> (rows, greedy frames) of the benchmark's three prompts."""
    plain = engines[0]
    found = {}
    for name, request in bench_requests(CFG, 3).items():
        request = replace(request, sampling=GREEDY)
        found[name] = build_rows(CFG, request, plain.tokenizer), plain.generate(request).frames
    return found


def _program(engine):
    return engine.prefill_graphs.program


def test_applies_once_on_top_of_prefix_moe_cache():
    assert_applies_once_on_top_of(prefix_moe_slots, STACK)
    with pytest.raises(NotApplicable):  # the slots feed prefix_moe_cache's buffers
        prefix_moe_slots.apply(transformed(engine_files(REFERENCE), UNCACHED), {"slots": 4})
    with pytest.raises(ValueError, match="at least 2"):
        prefix_moe_slots.apply(transformed(engine_files(REFERENCE), STACK), {"slots": 1})


def test_the_rotation_gives_the_uncached_logits(engines, prompts):
    plain, slots = engines
    for name in ROTATION * 2:
        rows, frames = prompts[name]
        want, got = teacher_forced(plain, rows, frames), teacher_forced(slots, rows, frames)
        torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)


def test_voice_after_the_others_reuses_its_own_reference_rows(engines, prompts):
    """With one slot the voice prompt after sentences shares only the instruction; with slots it finds its whole
    system turn (the reference's rows), and those come from its own slot."""
    _, slots = engines
    for name in ROTATION:
        teacher_forced(slots, *prompts[name])
    voice = prompts["voice"][0]
    shared_with_sentences = int((voice[:40] == prompts["sentences"][0][:40]).all(1).long().cumprod(0).sum())
    assert shared_with_sentences < system_rows(voice) - 8  # the reference rows are voice's own
    program = _program(slots)
    n = min(len(voice), program.slot_rows.shape[1])
    begins = (voice[None, :n] == program.slot_rows[:, :n]).all(2).long().cumprod(1).sum(1)
    home = int(torch.minimum(begins, program.slot_length).argmax())
    assert int(begins[home]) >= system_rows(voice)
    want = teacher_forced(slots, *prompts["voice"])
    for name in ("hello", "sentences"):
        teacher_forced(slots, *prompts[name])
    others = [s for s in range(program.slot_rows.shape[0]) if s != home]
    program.slot_outputs[others] += 1.0  # in no row the voice prompt takes from its own slot
    torch.testing.assert_close(teacher_forced(slots, *prompts["voice"]).main, want.main, atol=1e-5, rtol=1e-5)
    for name in ("hello", "sentences"):
        teacher_forced(slots, *prompts[name])
    program.slot_outputs[home, :, 4:system_rows(voice)] += 1.0  # within its reference rows: only reuse carries it
    assert not torch.allclose(teacher_forced(slots, *prompts["voice"]).main, want.main, atol=1e-3)


def test_a_full_set_of_slots_replaces_the_least_recently_used(prompts, tmp_path):
    """Two slots, three system turns (the voice, another voice, no voice): the third replaces the older voice."""
    weights = init_weights(CFG, seed=0, device="cpu")
    engine = load(_slots_files(slots=2), tmp_path).build_engine(CFG, weights, "cpu")
    voice, frames = prompts["voice"]
    other = build_rows(CFG, bench_requests(CFG, 3, seed=1)["voice"], engine.tokenizer)  # another reference
    program = _program(engine)

    def held(rows: torch.Tensor) -> bool:
        k = system_rows(rows)
        return bool(((program.slot_rows[:, :k] == rows[None, :k]).all(2).all(1) & (program.slot_length >= k)).any())

    for rows in (voice, other, voice):  # the other voice is now the less recently used
        teacher_forced(engine, rows, frames)
    assert held(voice) and held(other)
    teacher_forced(engine, *prompts["hello"])
    assert held(voice) and held(prompts["hello"][0]) and not held(other)


def test_a_stream_after_generate_samples_the_same_frames(tmp_path):
    """The evaluator's order: other prompts, then generate, then the same request streamed: the stream reuses what
    generate stored, so its sampled frames are generate's."""
    engine = load(_slots_files(), tmp_path).build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu")
    requests = {name: replace(r, sampling=SamplingParams(), seed=7) for name, r in bench_requests(CFG, 12).items()}
    for name in ROTATION:
        engine.generate(requests[name])
    engine.generate(requests["hello"])
    want = engine.generate(requests["voice"]).frames
    chunks = list(engine.stream(requests["voice"], StreamSchedule(first_chunk_frames=1, overlap_frames=4)))
    assert torch.equal(torch.cat([c.frames for c in chunks]), want)
