"""graph_topk_sampling on CPU (the graph engine's code runs eagerly there): it applies only on top of
cuda_graph_frame, draws exactly what the sort-based sampler draws from the same noise, and leaves the engine's
seeded generations unchanged."""
from __future__ import annotations

import pytest
import torch
from test_cuda_graphs import CFG, REFERENCE, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.sampling import graph_topk_sampling
from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.weights import init_weights


@pytest.fixture(scope="module")
def pkgs(tmp_path_factory):
    graph = transformed(engine_files(REFERENCE), [cuda_graph_frame])
    root = tmp_path_factory.mktemp("pkgs")
    return load(graph, root), load(transformed(graph, [graph_topk_sampling]), root)


def test_applies_only_on_top_of_cuda_graph_frame():
    with pytest.raises(NotApplicable):
        graph_topk_sampling.apply(engine_files(REFERENCE), {})
    graph_topk_sampling.apply(transformed(engine_files(REFERENCE), [cuda_graph_frame]), {})


@pytest.mark.parametrize("keep_crossing", [True, False])
@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.3])
def test_draws_equal_the_sort_based_race(pkgs, keep_crossing, top_p):
    plain, fast = (p.decode_sampling for p in pkgs)
    gen = torch.Generator().manual_seed(0)
    for trial in range(50):
        logits = torch.randn(4096, generator=gen) * 3
        noise = fast.exponential(torch.randint(2**32, (4096,), generator=gen))
        want = plain.race(logits, 0.8, top_p, 30, keep_crossing, noise)
        assert fast.race(logits, 0.8, top_p, 30, keep_crossing, noise) == want, trial


def test_seeded_generations_are_unchanged(pkgs):
    weights = init_weights(CFG, seed=0, device="cpu")
    plain, fast = (p.build_engine(CFG, weights, "cpu") for p in pkgs)
    sampling = SamplingParams(code_top_k=8, ras_top_k=8)  # tiny heads are 64 wide: keep top-k below that
    request = TTSRequest(text="Hello there", max_frames=10, ignore_eos=True, seed=5, sampling=sampling)
    assert torch.equal(fast.generate(request).frames, plain.generate(request).frames)
