"""prefill_state_zero on CPU at drama3-tiny, on the graphed prefill run eagerly (as its graphs replay it): the
DeltaNet states are views of two buffers; a request after another starts from zero states (its logits equal a fresh
engine's and the stack's without the transform); reset leaves the states to the prefill program."""
from __future__ import annotations

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.prefill_state_zero import prefill_state_zero
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, GREEDY, REFERENCE, assert_applies_once_on_top_of, load, transformed
from test_prefill_row_ladder import STACK
from test_prefix_moe_cache import _prompt


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root, files = tmp_path_factory.mktemp("state_zero"), transformed(engine_files(REFERENCE), STACK)
    return [load(f, root) for f in (files, transformed(files, [prefill_state_zero]))]


def test_applies_once_on_top_of_the_graphed_prefill():
    assert_applies_once_on_top_of(prefill_state_zero, STACK)
    with pytest.raises(NotApplicable):
        prefill_state_zero.apply(engine_files(REFERENCE), {})


def test_the_states_are_views_of_two_buffers(packages):
    state = packages[1].build_engine(CFG, init_weights(CFG, seed=0, device="cpu"), "cpu").state
    deltanet = [c for c in state.backbone if hasattr(c, "recurrent")]  # the package's DeltaNetState
    assert len(deltanet) == state.deltanet_conv.shape[0] == state.deltanet_recurrent.shape[0]
    for i, cache in enumerate(deltanet):
        assert cache.conv.data_ptr() == state.deltanet_conv[i].data_ptr() and cache.conv.is_contiguous()
        assert cache.recurrent.data_ptr() == state.deltanet_recurrent[i].data_ptr()


def test_a_request_after_another_starts_from_zero_states(packages):
    weights = init_weights(CFG, seed=0, device="cpu")
    plain, zeroed = (pkg.build_engine(CFG, weights, "cpu") for pkg in packages)
    first, second = _prompt(plain, "The quick brown fox"), _prompt(plain, "Hello there")
    fresh = teacher_forced(packages[1].build_engine(CFG, weights, "cpu"), *second)
    teacher_forced(zeroed, *first)
    with torch.inference_mode():  # as the engine's prefill calls it
        zeroed.state.reset(0, GREEDY.ras_window, second[0][-1], len(second[0]) - 1)
    assert all(s.abs().max() > 0 for s in (zeroed.state.deltanet_conv, zeroed.state.deltanet_recurrent))
    after = teacher_forced(zeroed, *second)
    torch.testing.assert_close(after.main, fresh.main, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(after.codes, fresh.codes, atol=1e-6, rtol=1e-6)
    want = teacher_forced(plain, *second)
    torch.testing.assert_close(after.main, want.main, atol=1e-5, rtol=1e-5)
