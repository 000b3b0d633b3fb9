"""Long tiny generations through prefill/decode_frame: activations stay finite and MoE routing stays diverse."""
from __future__ import annotations

import torch

from reference_runtime.api import SamplingParams, TTSRequest
from reference_runtime.config import get_config
from reference_runtime.model import build_engine
from reference_runtime.prompt import build_rows
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")


def test_200_frames_stay_finite_and_route_across_many_experts():
    engine = build_engine(CFG, init_weights(CFG, seed=2, device="cpu"), "cpu")
    rows = build_rows(CFG, TTSRequest(text="A long utterance that keeps going."))
    step = engine.prefill(rows, SamplingParams(), seed=0)
    after_prefill = engine.model.backbone.expert_counts().clone()
    frames = []
    for _ in range(200):
        assert torch.isfinite(step.main_logits).all() and torch.isfinite(step.code_logits).all()
        frames.append(step.frame)
        step = engine.decode_frame()
    frames = torch.stack(frames)
    routed = engine.model.backbone.expert_counts() - after_prefill  # (layers, experts) over the 200 frames
    b = CFG.backbone
    assert routed.sum() == 200 * b.num_layers * b.num_experts_per_tok
    assert ((routed > 0).sum(dim=1) == b.num_experts).all(), routed  # every layer uses every expert
    assert routed.max() < 0.5 * routed.sum(dim=1).min(), routed  # no expert takes half a layer's tokens
    assert len(frames[:, 1].unique()) > 20  # the semantic draws do not collapse
