"""prefill_row_ladder on CPU at drama3-tiny: it applies once on top of cuda_graph_prefill, its buckets step evenly
within each power of two, and a prompt padded to a ladder bucket gets the teacher-forced logits it gets padded to
the doubling bucket (the padded program runs eagerly on CPU, as its graphs replay it on CUDA)."""
from __future__ import annotations

import dataclasses
import importlib
from types import SimpleNamespace

import pytest
import torch

from candidates.repo import engine_files
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.cuda_graph_prefill import cuda_graph_prefill
from knowledge_base.transforms.prefill_row_ladder import prefill_row_ladder
from knowledge_base.transforms.triton_deltanet import triton_deltanet
from knowledge_base.transforms.triton_prefill_moe import triton_prefill_moe
from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

from test_cuda_graphs import CFG, REFERENCE, assert_applies_once_on_top_of, load, transformed

EAGER = dataclasses.replace(cuda_graph_prefill, space=cuda_graph_prefill.space | {"compile_steps": (False,)})
STACK = [cuda_graph_frame, triton_prefill_moe, triton_deltanet, EAGER]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root, files = tmp_path_factory.mktemp("ladder"), transformed(engine_files(REFERENCE), STACK)
    return load(files, root), load(transformed(files, [prefill_row_ladder]), root)


def test_applies_once_on_top_of_cuda_graph_prefill():
    assert_applies_once_on_top_of(prefill_row_ladder, STACK)


def test_buckets_step_evenly_within_each_power_of_two(packages):
    graphs = importlib.import_module(f"{packages[1].__name__}.prefill_graphs").PrefillGraphs
    fake = SimpleNamespace(program=SimpleNamespace(capacity=1000))
    buckets = [graphs.bucket(fake, rows) for rows in (1, 52, 64, 65, 135, 209, 257, 999)]
    assert buckets == [64, 64, 64, 80, 160, 224, 320, 1000]


def test_a_ladder_bucket_gives_the_doubling_buckets_logits(packages):
    weights = init_weights(CFG, seed=0, device="cpu")
    doubling, ladder = (p.build_engine(CFG, weights, "cpu") for p in packages)
    codes = torch.randint(CFG.codec.residual_codebook_size, (CFG.num_codebooks, 17),
                          generator=torch.Generator().manual_seed(0))
    request = TTSRequest(text="Nice to meet you.", references=(VoiceReference("This is my voice.", codes),),
                         max_frames=3, ignore_eos=True, seed=1)
    rows = build_rows(CFG, request, doubling.tokenizer)[:65]  # pads to 128 rows doubling, to 80 on the ladder
    assert (doubling.prefill_graphs.bucket(65), ladder.prefill_graphs.bucket(65)) == (128, 80)
    frames = doubling.generate(request).frames
    want, got = (teacher_forced(engine, rows, frames) for engine in (doubling, ladder))
    torch.testing.assert_close(got.main, want.main, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
