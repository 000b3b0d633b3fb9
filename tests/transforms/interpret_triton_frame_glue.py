"""triton_frame_glue on CPU, run by test_triton_interpreter.py in a process started with TRITON_INTERPRET=1: it
applies only on top of triton_code_heads (and its prerequisites); its entry kernel gives the torch predict step's
main index, semantic flag and shared tower layers' code embeddings (layer 0's with the input frame's codebook sum),
drawn or forced, audio or text input rows, at drama3-tiny's dims (float32) and a bf16 width; its finish kernel
writes the frame row, the history row, the RAS window and pos as the torch tail does; the engine's teacher-forced
logits match the reference within the codebook and its seeded generations are the engine's without it."""
from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch
import torch.nn.functional as F
from interpret_triton_tower import cuda_like_bf16  # noqa: F401 (an autouse fixture: bf16 as on CUDA)
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, load, transformed, use_torch_tower_layers

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_code_heads import triton_code_heads
from knowledge_base.transforms.triton_frame_glue import triton_frame_glue
from knowledge_base.transforms.triton_sampling import triton_sampling
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model.tower import is_semantic_token
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

pytest.importorskip("triton")
assert os.environ.get("TRITON_INTERPRET") == "1", "run through test_triton_interpreter.py (TRITON_INTERPRET=1)"
CFG = get_config("drama3-tiny")
PREREQUISITES = [cuda_graph_frame, triton_tower, triton_sampling, triton_code_heads]
SHARED = CFG.tower.num_shared_layers + 1  # tower layers fed the main token's code


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(the prerequisites alone, with triton_frame_glue)."""
    root, base = tmp_path_factory.mktemp("pkg"), transformed(engine_files(REFERENCE), PREREQUISITES)
    return load(base, root), load(transformed(base, [triton_frame_glue]), root)


def test_applies_only_on_top_of_the_code_heads_and_once():
    assert triton_frame_glue.requires == ("cuda_graph_frame", "triton_sampling", "triton_code_heads")
    assert triton_frame_glue.devices == frozenset({"cuda"}) and triton_frame_glue.lesson
    base = assert_applies_once_on_top_of(triton_frame_glue, PREREQUISITES)
    with pytest.raises(NotApplicable, match="apply triton_code_heads first"):
        triton_frame_glue.apply(transformed(engine_files(REFERENCE), PREREQUISITES[:3]),
                                next(triton_frame_glue.variants()))
    with pytest.raises(ValueError, match="power of two"):
        triton_frame_glue.apply(base, next(triton_frame_glue.variants()) | {"num_warps": 3})


def _glue(pkg, hidden: int, dtype: torch.dtype, gen: torch.Generator):
    """A FrameGlue over random tables at `hidden` wide rows, and the tables and codebook rows it reads."""
    cfg = dataclasses.replace(CFG, backbone=dataclasses.replace(CFG.backbone, hidden_size=hidden))
    tables = [torch.randn((CFG.codebook_size, hidden), generator=gen).to(dtype) for _ in range(SHARED + 3)]
    books = torch.randn((CFG.num_codebooks * CFG.codebook_size, hidden), generator=gen).to(dtype)
    return importlib.import_module(f"{pkg.__name__}.frame_glue").FrameGlue(cfg, tables, books), tables, books


def _row(main: int, gen: torch.Generator) -> torch.Tensor:
    return torch.cat((torch.tensor([main]), torch.randint(CFG.codebook_size, (CFG.num_codebooks,), generator=gen)))


@pytest.mark.parametrize("hidden, dtype", [(CFG.hidden_size, torch.float32), (256, torch.bfloat16)],
                         ids=["tiny", "bf16"])
def test_entry_kernel_is_the_torch_steps_select_and_embeddings(packages, hidden, dtype):
    base, fast = packages
    gen = torch.Generator().manual_seed(hidden)
    glue, tables, books = _glue(fast, hidden, dtype, gen)
    audio, text, eos = CFG.semantic_begin + 7, 3, CFG.eos_token_id
    tower = base.tower.Tower.__new__(base.tower.Tower)  # only its input_frame_embedding, over these rows
    tower.config, tower.codebook_embeddings = CFG, books
    for drawn, forced, last in [(5, None, audio), (0, None, audio), (9, audio + 20, text), (9, eos, audio),
                                (CFG.codebook_size, None, text), (1, text, audio)]:
        use = torch.tensor([forced is not None])
        force, frame = _row(forced if forced is not None else audio, gen), _row(last, gen)
        glue.entry(torch.tensor(drawn), use, force, frame)
        f0 = force[0]
        want_index = torch.where(use[0], torch.where(is_semantic_token(CFG, f0), f0 - CFG.semantic_begin + 1, 0),
                                 torch.tensor(drawn))
        scale = (want_index > 0).to(dtype)
        assert int(glue.index) == int(want_index) and glue.scale.dtype == dtype and float(glue.scale) == float(scale)
        code = (want_index - 1).clamp_min(0)
        for j in range(SHARED):
            want = F.embedding(code[None], tables[j]) * scale
            if j == 0:
                want = want + tower.input_frame_embedding(frame[None])
            tol = 1e-6 if dtype == torch.float32 else 1e-2  # bf16: the codebook sum rounded once, in another order
            torch.testing.assert_close(glue.e[j:j + 1], want, atol=tol, rtol=tol)


@pytest.mark.parametrize("window", [0, 1, 16])
def test_finish_kernel_is_the_torch_tail(packages, window):
    _, fast = packages
    gen = torch.Generator().manual_seed(window)
    glue, _, _ = _glue(fast, CFG.hidden_size, torch.float32, gen)
    history = torch.zeros((32, 11), dtype=torch.long)
    for trial, (index, forced) in enumerate([(7, False), (0, False), (3, True), (0, True), (CFG.codebook_size, False)]):
        glue.index.fill_(index)
        codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks - 1,), generator=gen)
        use, force = torch.tensor([forced]), _row(CFG.semantic_begin + 11, gen)
        frame, pos = torch.zeros(11, dtype=torch.long), torch.tensor([trial * 3])
        recent = torch.randint(-1, 50, (window,), generator=gen)
        want_history, want_recent = history.clone(), torch.cat((recent, torch.tensor([index])))[1:]
        semantic = torch.tensor(index > 0)
        main = torch.where(semantic, CFG.semantic_begin + max(index - 1, 0), CFG.eos_token_id)
        want = torch.where(use[0], force, torch.cat((main[None], torch.cat((torch.tensor([max(index - 1, 0)]), codes))
                                                     * semantic)))
        want_history[trial * 3] = want
        glue.finish(codes, use, force, frame, history, pos, recent)
        assert torch.equal(frame, want) and torch.equal(history, want_history)
        assert torch.equal(recent, want_recent) and int(pos) == trial * 3 + 1


def test_params_module_holds_the_first_variant(packages):
    _, fast = packages
    params = importlib.import_module(f"{fast.__name__}.frame_glue_params")
    assert {"block_k": params.BLOCK_K, "num_warps": params.NUM_WARPS} == next(triton_frame_glue.variants())


def test_engine_matches_the_reference_and_draws_as_without_it(packages, tmp_path, monkeypatch):
    base, fast = packages
    use_torch_tower_layers(packages, tmp_path, monkeypatch.setattr)
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    calls = []
    for name in ("entry", "finish"):
        original = getattr(eng.program.glue, name)
        monkeypatch.setattr(eng.program.glue, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    request = TTSRequest(text="Hello", max_frames=3, ignore_eos=True, seed=1)
    frames = ref.generate(request).frames
    rows = build_rows(CFG, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    valid = CFG.codec.residual_codebook_size
    torch.testing.assert_close(got.main, want.main, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.codes[..., :valid], want.codes[..., :valid], atol=1e-4, rtol=1e-4)
    assert calls == ["entry", "finish"] * len(frames)
    sampling = SamplingParams(code_top_k=8, ras_top_k=8, ras_window=4)  # tiny heads are 64 wide
    request = TTSRequest(text="Hello there", max_frames=8, ignore_eos=True, seed=5, sampling=sampling)
    assert torch.equal(eng.generate(request).frames, base.build_engine(CFG, weights, "cpu").generate(request).frames)
