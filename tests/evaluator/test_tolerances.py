"""`swarm tolerances`: the reference against itself with its weights upcast, and gates at twice the distance."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
import yaml
from typer.testing import CliRunner

from evaluator.tolerances import Distances, measure, recommend, upcast, wilson_upper
from reference_runtime.config import get_config
from reference_runtime.weights import SCALE_SUFFIX, init_weights
from swarm.cli import app
from targets.schema import ToleranceSpec


def test_upcast_shares_the_fp8_experts_and_raises_every_other_float():
    weights = init_weights(get_config("drama3-tiny"), 0, "cpu", dtype=torch.bfloat16)
    up, precision = upcast(weights)
    assert precision == "bfloat16 -> float32, float32 -> float64"  # the CPU codec's float32 weights go up too
    for name, w in weights.items():
        if w.dtype == torch.float8_e4m3fn or name.endswith(SCALE_SUFFIX):
            assert up[name] is w
        else:
            assert up[name].dtype in (torch.float32, torch.float64) and torch.equal(up[name].to(w.dtype), w)


def test_the_upcast_reference_is_close_and_tight_gates_are_told_they_reject_it(tiny_target):
    d = measure(tiny_target, prompts=1, frames=4, seed=3)
    assert d.precision == "float32 -> float64" and not d.codec_perturbed and d.admitted_by_target
    assert 0 < d.logit_max_abs < 1e-4 and d.eos_max_abs < 1e-4 and d.top1_agreement == 1.0
    tight = tiny_target.tolerances.model_copy(update={"logit_atol": 1e-12, "logit_rtol": 1e-12,
                                                      "eos_logit_atol": 1e-12})
    assert not measure(tiny_target.model_copy(update={"tolerances": tight}), prompts=1, frames=4,
                       seed=3).admitted_by_target


def test_recommended_gates_double_the_distances_and_bound_clean_agreement():
    d = Distances(precision="bfloat16 -> float32", prompts=3, frames=32, logit_max_abs=0.06,
                  logit_atol_for_twice=0.101, eos_max_abs=0.02, top1_agreement=0.975, top5_agreement=1.0,
                  steps_per_prompt=320, waveform_max_abs=0.011, codec_perturbed=True, admitted_by_target=True)
    gates = recommend(d)
    assert (gates.logit_atol, gates.eos_logit_atol, gates.waveform_max_abs) == (0.11, 0.04, 0.022)
    assert gates.top1_agreement == math.floor(1000 * (1 - 2 * wilson_upper(8, 320))) / 1000 < 0.95
    assert 0.97 < gates.top5_agreement < 1  # nothing seen in 320 steps is not a rate of 0
    assert wilson_upper(0, 120) == pytest.approx(1.96 ** 2 / (120 + 1.96 ** 2))
    assert recommend(replace(d, logit_atol_for_twice=0.0121)).logit_atol == 0.013  # two digits, no float noise
    assert recommend(replace(d, codec_perturbed=False)).waveform_max_abs is None


def test_cli_prints_gates_that_load_as_a_target_section(tmp_path, tiny_target):
    target_file = tmp_path / "t.yaml"
    target_file.write_text(yaml.safe_dump(tiny_target.model_dump(mode="json")))
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["tolerances", str(target_file), "--prompts", "1", "--frames", "3", "--json", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    section = yaml.safe_load(result.output[result.output.index("tolerances:"):])["tolerances"]
    assert isinstance(section["logit_atol"], float) and section["logit_atol"] >= 1e-6  # YAML reads 1e-06 as text
    assert ToleranceSpec.model_validate(section).top1_agreement == section["top1_agreement"]
    assert json.loads((tmp_path / "t.json").read_text())["distances"]["frames"] == 3
