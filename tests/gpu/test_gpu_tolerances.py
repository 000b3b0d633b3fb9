"""`swarm tolerances` at full drama3 size on CUDA: the bf16 reference against its float32 upcast, codec included
(on GPU the codec runs in the weights' dtype)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evaluator.tolerances import measure, recommend
from targets import load_target

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_full_size_bf16_against_its_float32_upcast():
    d = measure(load_target(REPO / "targets" / "drama3_h200.yaml"), prompts=1, frames=4, seed=0)
    assert d.precision == "bfloat16 -> float32" and d.codec_perturbed
    assert 0 < d.logit_max_abs < 1 and 0 < d.waveform_max_abs < 1 and d.top1_agreement >= 0.5
    gates = recommend(d)
    assert gates.logit_atol > 0 and gates.waveform_max_abs is not None
