"""prefill_fused_projections on CPU: it applies on top of cuda_graph_frame only; the graph engine hands every
backbone mixer and tower layer the frame's own fused matrices (the same tensors, no copy), or none where the frame
keeps its matrices apart; and the engine's teacher-forced logits match the reference on drama3-tiny, whose
prefill runs the model's layers eagerly here. On CUDA the swarm's gate at full size judges it."""
from __future__ import annotations

import dataclasses

import pytest
from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, assert_logits_match, load, transformed

from candidates.repo import engine_files
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.prefill_fused_projections import prefill_fused_projections
from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")


def test_applies_only_on_top_of_cuda_graph_frame():
    assert prefill_fused_projections.requires == ("cuda_graph_frame",)
    assert_applies_once_on_top_of(prefill_fused_projections, [cuda_graph_frame])


@pytest.mark.parametrize("fuse", [True, False])
def test_layers_share_the_frames_fused_matrices_and_match_the_reference(tmp_path, fuse):
    frame = dataclasses.replace(cuda_graph_frame, space=cuda_graph_frame.space | {"fuse_projections": (fuse,)})
    pkg = load(transformed(engine_files(REFERENCE), [frame, prefill_fused_projections]), tmp_path)
    weights = init_weights(CFG, seed=0, device="cpu")
    ref, eng = build_engine(CFG, weights, "cpu"), pkg.build_engine(CFG, weights, "cpu")
    w = eng.program.w
    for layer, lw in zip(eng.model.backbone.layers, w.layers):
        if hasattr(lw.mixer, "proj"):  # a DeltaNet layer
            held, frames = layer.mixer.in_proj, lw.mixer.proj
        else:
            held, frames = layer.mixer.qkv, lw.mixer.qkv
        assert held is (frames if fuse else None)
    for layer, tw in zip(eng.model.tower.layers, w.tower):
        assert layer.self_attn.qkv is (tw.attn.qkv if fuse else None)
        assert layer.gate_up is (tw.gate_up if fuse else None)
    codes = weights["audio_decoder.codebook_embeddings.weight"].new_zeros((CFG.num_codebooks, 6)).long()
    for request in (TTSRequest(text="Hello there", max_frames=3, ignore_eos=True, seed=1),
                    TTSRequest(text="Again", references=(VoiceReference("Me.", codes),), max_frames=2,
                               ignore_eos=True, seed=2)):
        assert_logits_match(ref, eng, request, tol=1e-5)
