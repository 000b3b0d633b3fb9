"""cuda_graph_frame and cuda_graph_codec on CPU: their edits apply to the reference package (in either order),
and the engine they produce runs its graph code eagerly there, so its teacher-forced logits, greedy frames,
EOS handling and streaming must match the reference on drama3-tiny. Replay on CUDA: tests/gpu/."""
from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path

import pytest
import torch

from candidates.repo import engine_files, write_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.triton_tower import triton_tower
from reference_runtime.api import SamplingParams, StreamSchedule, TTSRequest, VoiceReference
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.model.codec import Codec
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import codec_dtype, init_weights
from swarm.edits import apply_edits, patch_edits

CFG = get_config("drama3-tiny")
REFERENCE = Path(__file__).resolve().parents[2] / "reference_runtime" / "model"
GREEDY = SamplingParams(temperature=0, ras_temperature=0, code_temperature=0)
_counter = itertools.count()


def transformed(files: dict[str, str], transforms) -> dict[str, str]:
    for transform in transforms:
        patches = transform.apply(files, next(transform.variants()))
        files = apply_edits(files, patch_edits(patches))
    return files


def assert_applies_once_on_top_of(transform, prerequisites) -> dict[str, str]:
    """`transform` is NotApplicable to the reference package, applies with every variant on top of
    `prerequisites`, and is NotApplicable a second time; returns the package with the prerequisites."""
    files = engine_files(REFERENCE)
    with pytest.raises(NotApplicable):
        transform.apply(files, next(transform.variants()))
    base = transformed(files, prerequisites)
    for params in transform.variants():
        transform.apply(base, params)
    with pytest.raises(NotApplicable):
        transform.apply(transformed(base, [transform]), next(transform.variants()))
    return base


def assert_logits_match(ref, eng, request: TTSRequest, tol: float = 1e-4) -> torch.Tensor:
    """`eng` teacher-forced on the reference's own frames for `request` gives the reference's main and code logits
    (atol = rtol = tol); returns those frames."""
    frames = ref.generate(request).frames
    rows = build_rows(CFG, request, ref.tokenizer)
    want, got = teacher_forced(ref, rows, frames), teacher_forced(eng, rows, frames)
    torch.testing.assert_close(got.main, want.main, atol=tol, rtol=tol)
    torch.testing.assert_close(got.codes, want.codes, atol=tol, rtol=tol)
    return frames


def assert_kernels_run_every_decode_frame(transform, wrapper: str, layers: int, root: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference package with cuda_graph_frame, triton_tower and the backbone-kernel `transform` passes
    drama3-tiny's teacher-forced logits, and its decode_step calls `wrapper` once for each of `layers` layers in
    every frame after the first. The tower steps run the torch tower layer (use_torch_tower_layers)."""
    fast = load(transformed(engine_files(REFERENCE), [cuda_graph_frame, triton_tower, transform]), root)
    use_torch_tower_layers([fast], root, monkeypatch.setattr)
    step = importlib.import_module(f"{fast.__name__}.decode_step")
    original, calls = getattr(step, wrapper), []
    monkeypatch.setattr(step, wrapper, lambda *args: calls.append(1) or original(*args))
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), fast.build_engine(CFG, weights, "cpu")
    frames = assert_logits_match(ref, eng, TTSRequest(text="Hello", max_frames=4, ignore_eos=True, seed=1))
    assert layers and len(calls) == layers * (len(frames) - 1)


def load(files: dict[str, str], root: Path):
    name = f"cuda_graphs_pkg_{next(_counter)}"
    write_files(files, root / name)
    sys.path.insert(0, str(root))
    return importlib.import_module(name)


def use_torch_tower_layers(packages, root: Path, set_attr=setattr) -> None:
    """Each package's decode step runs the tower layers as cuda_graph_frame's torch step. Their kernels are
    triton_tower's, checked in the engine by interpret_triton_tower.py; interpreted in every other engine test they
    took most of its time. set_attr: monkeypatch.setattr for one test, setattr for a module's packages."""
    torch_layer = load(transformed(engine_files(REFERENCE), [cuda_graph_frame]), root).decode_tower.tower_layer_decode
    for pkg in packages:
        set_attr(importlib.import_module(f"{pkg.__name__}.decode_step"), "tower_layer", torch_layer)


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    files = transformed(engine_files(REFERENCE), [cuda_graph_frame, cuda_graph_codec])
    return load(files, tmp_path_factory.mktemp("pkg"))


@pytest.fixture(scope="module")
def weights():
    return init_weights(CFG, seed=0, device="cpu")


@pytest.fixture(scope="module")
def engines(pkg, weights):
    return build_engine(CFG, weights, "cpu"), pkg.build_engine(CFG, weights, "cpu")


def test_transforms_apply_in_either_order_and_only_target_cuda():
    files = engine_files(REFERENCE)
    both = transformed(files, [cuda_graph_frame, cuda_graph_codec])
    assert both == transformed(files, [cuda_graph_codec, cuda_graph_frame])
    assert "GraphEngine(config, model, codec, device, weights)" in both["__init__.py"]
    assert "GraphedCodec.from_weights(" in both["__init__.py"]
    for t in (cuda_graph_frame, cuda_graph_codec):
        assert t.devices == frozenset({"cuda"}) and t.lesson and t.feature
        for params in t.variants():
            t.apply(files, params)
        with pytest.raises(NotApplicable):
            t.apply(transformed(files, [t]), next(t.variants()))


def test_engine_is_the_graph_engine_with_the_graphed_codec(engines):
    _, eng = engines
    assert type(eng).__name__ == "GraphEngine" and type(eng.codec).__name__ == "GraphedCodec"


def _voice() -> TTSRequest:
    gen = torch.Generator().manual_seed(5)
    codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, 12), generator=gen)
    return TTSRequest(text="Nice to meet you.", references=(VoiceReference("This is my voice.", codes),),
                      max_frames=10, ignore_eos=True, seed=1)


@pytest.mark.parametrize("request_", [TTSRequest(text="Hello there", max_frames=10, ignore_eos=True, seed=2),
                                      _voice()], ids=["text", "voice"])
def test_teacher_forced_logits_match_reference(engines, request_):
    assert_logits_match(*engines, request_)


@pytest.fixture(scope="module")
def eos_case(pkg, weights):
    """Greedy weights whose generation stops with EOS part-way: the EOS row of lm_head scaled up until it wins."""
    for scale in (4.0, 5.0, 6.0, 8.0):
        boosted = dict(weights)
        boosted["lm_head.weight"] = weights["lm_head.weight"].clone()
        boosted["lm_head.weight"][CFG.eos_token_id] *= scale
        ref = build_engine(CFG, boosted, "cpu")
        request = TTSRequest(text="Hello there", max_frames=24, sampling=GREEDY, seed=0)
        gen = ref.generate(request)
        if 2 < gen.frames.shape[0] < 24:
            return ref, pkg.build_engine(CFG, boosted, "cpu"), request, gen
    pytest.fail("no lm_head EOS scale made the greedy reference stop between frames 3 and 23")


def test_greedy_generation_stops_at_the_same_eos(eos_case):
    _, eng, request, want = eos_case
    got = eng.generate(request)
    assert torch.equal(got.frames, want.frames)
    torch.testing.assert_close(got.audio, want.audio, atol=1e-5, rtol=0)


def test_greedy_stream_chunks_match_reference(eos_case):
    ref, eng, request, _ = eos_case
    for schedule in (StreamSchedule(first_chunk_frames=1), StreamSchedule(first_chunk_frames=2, window_ends=(5,),
                                                                          window_stride=3, overlap_frames=2)):
        want, got = list(ref.stream(request, schedule)), list(eng.stream(request, schedule))
        assert [(c.frame_start, c.frame_end) for c in got] == [(c.frame_start, c.frame_end) for c in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g.audio, w.audio, atol=1e-5, rtol=0)


def test_sampled_generation_is_well_formed_and_seeded(engines):
    _, eng = engines
    request = TTSRequest(text="Hello", max_frames=12, ignore_eos=True, seed=3)
    a, b = eng.generate(request), eng.generate(request)
    assert torch.equal(a.frames, b.frames) and a.frames.shape == (12, 11)
    other = eng.generate(TTSRequest(text="Hello", max_frames=12, ignore_eos=True, seed=4))
    assert not torch.equal(a.frames, other.frames)
    semantic = a.frames[:, 0] != CFG.eos_token_id
    assert torch.equal(a.frames[semantic, 0], CFG.semantic_begin + a.frames[semantic, 1])
    assert (a.frames[semantic, 2:] < CFG.codec.residual_codebook_size).all()
    assert (a.frames[~semantic, 1:] == 0).all()


def test_noise_is_exponential_and_keyed_by_seed_and_position(pkg):
    table = pkg.decode_sampling.NoiseTable(11, 4097, torch.device("cpu"))
    draw = lambda seed, pos: table.draw(torch.tensor([seed]), torch.tensor([pos]))
    noise = draw(0, 7)
    assert torch.isfinite(noise).all() and (noise > 0).all()
    assert abs(noise.mean().item() - 1) < 0.03 and abs(noise.var().item() - 1) < 0.06
    assert torch.equal(noise, draw(0, 7))
    assert not torch.equal(noise, draw(0, 8)) and not torch.equal(noise, draw(1, 7))
    assert abs(torch.corrcoef(torch.stack((noise.flatten(), draw(0, 8).flatten())))[0, 1].item()) < 0.02


def test_extreme_hashes_give_positive_noise_and_in_range_codes(pkg):
    sampling = pkg.decode_sampling
    noise = sampling.exponential(torch.tensor([0, 1, 2**31, 2**32 - 1]))
    assert torch.isfinite(noise).all() and (noise > 0).all()
    logits = torch.randn(CFG.tower.head_size)
    for index in (0, CFG.codec.residual_codebook_size, CFG.tower.head_size - 1):  # the largest hash anywhere
        bits = torch.randint(2**32, (CFG.tower.head_size,), generator=torch.Generator().manual_seed(index))
        bits[index] = 2**32 - 1
        code = sampling.draw_code(logits, SamplingParams(), CFG.codec.residual_codebook_size, sampling.exponential(bits))
        assert 0 <= int(code) < CFG.codec.residual_codebook_size


def test_decode_before_prefill_raises(pkg, weights):
    with pytest.raises(RuntimeError, match="prefill"):
        pkg.build_engine(CFG, weights, "cpu").decode_frame()


def test_codec_ladder(pkg):
    lengths = [pkg.codec_graph.ladder_length(n) for n in (1, 2, 3, 4, 5, 7, 9, 10, 13, 200)]
    assert lengths == [1, 2, 3, 4, 6, 8, 12, 12, 16, 256]


def test_zero_padding_leaves_the_decoded_prefix_unchanged(weights):
    """The premise of cuda_graph_codec: a causal codec decodes the first n frames the same whatever follows."""
    codec = Codec.from_weights(CFG.codec, weights, "cpu", codec_dtype(torch.device("cpu"), torch.float32))
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(CFG.codec.residual_codebook_size, (1, CFG.num_codebooks, 5), generator=gen)
    padded = torch.cat((codes, torch.zeros((1, CFG.num_codebooks, 7), dtype=torch.long)), dim=-1)
    # within fp32 rounding: the two lengths may take different conv kernels (1.5e-6 seen on an AMD EPYC CI host);
    # frames leaking backwards through the padding would differ by the waveform's own scale
    with torch.inference_mode():
        torch.testing.assert_close(codec(padded)[:, :5 * CFG.codec.frame_samples], codec(codes), atol=1e-5, rtol=0)
