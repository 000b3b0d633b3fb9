"""HF-layout checkpoint: bit-exact multi-shard round trip, per-expert on-disk layout, and clear errors for
missing/misshapen/unexpected tensors and bad config.json files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from reference_runtime.checkpoint import INDEX_FILE, load_checkpoint, save_checkpoint
from reference_runtime.config import get_config
from reference_runtime.fp8 import FP8_DTYPE
from reference_runtime.hf_config import CheckpointError, from_hf_config, to_hf_config
from reference_runtime.weights import init_weights, weights_fingerprint

TINY = get_config("drama3-tiny")
EXPERT = "model.layers.1.mlp.experts"


@pytest.fixture(scope="module")
def tiny_weights():
    return init_weights(TINY, seed=7, device="cpu")


@pytest.fixture
def ckpt(tmp_path, tiny_weights) -> Path:
    save_checkpoint(TINY, tiny_weights, tmp_path / "tiny", max_shard_bytes=1 << 20)
    return tmp_path / "tiny"


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == FP8_DTYPE else t


def _index(ckpt: Path) -> dict[str, str]:
    return json.loads((ckpt / INDEX_FILE).read_text())["weight_map"]


def _rewrite_shard(ckpt: Path, name: str, edit) -> Path:
    """Apply `edit(tensors)` to the shard holding `name` (and drop names it removed from the index)."""
    weight_map = _index(ckpt)
    shard = ckpt / weight_map[name]
    tensors = load_file(shard)
    edit(tensors)
    save_file(tensors, shard, metadata={"format": "pt"})
    return shard


def _edit_config(ckpt: Path, edit) -> None:
    raw = json.loads((ckpt / "config.json").read_text())
    edit(raw)
    (ckpt / "config.json").write_text(json.dumps(raw))


def test_round_trip_is_bit_exact_over_several_shards(ckpt, tiny_weights):
    assert len(set(_index(ckpt).values())) > 1
    config, loaded = load_checkpoint(ckpt, "cpu")
    assert config == TINY
    assert list(loaded) == list(tiny_weights)
    for name, w in tiny_weights.items():
        assert loaded[name].dtype == w.dtype and torch.equal(_bits(loaded[name]), _bits(w)), name
    assert weights_fingerprint(loaded) == weights_fingerprint(tiny_weights)


def test_experts_are_stored_per_expert_gate_rows_then_up_rows(ckpt, tiny_weights):
    weight_map = _index(ckpt)
    assert f"{EXPERT}.gate_up_proj" not in weight_map
    inter, block = TINY.backbone.moe_intermediate_size, TINY.backbone.fp8_block
    fused = tiny_weights[f"{EXPERT}.gate_up_proj"]
    scales = tiny_weights[f"{EXPERT}.gate_up_proj_scale_inv"]
    with safe_open(ckpt / weight_map[f"{EXPERT}.5.up_proj.weight"], "pt") as f:
        assert torch.equal(_bits(f.get_tensor(f"{EXPERT}.5.up_proj.weight")), _bits(fused[5, inter:]))
    with safe_open(ckpt / weight_map[f"{EXPERT}.5.gate_proj.weight_scale_inv"], "pt") as f:
        assert torch.equal(f.get_tensor(f"{EXPERT}.5.gate_proj.weight_scale_inv"), scales[5, :inter // block])
    with safe_open(ckpt / weight_map[f"{EXPERT}.2.down_proj.weight"], "pt") as f:
        assert torch.equal(_bits(f.get_tensor(f"{EXPERT}.2.down_proj.weight")),
                           _bits(tiny_weights[f"{EXPERT}.down_proj"][2]))


def test_bf16_checkpoint_round_trips_and_records_its_dtype(tmp_path):
    weights = init_weights(TINY, seed=1, device="cpu", dtype=torch.bfloat16)
    save_checkpoint(TINY, weights, tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    _, loaded = load_checkpoint(tmp_path / "bf16", "cpu")
    assert weights_fingerprint(loaded) == weights_fingerprint(weights)


def test_missing_tensor_in_index_is_named_with_its_expected_shape(ckpt):
    index = json.loads((ckpt / INDEX_FILE).read_text())
    del index["weight_map"][f"{EXPERT}.3.down_proj.weight"]
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=rf"missing 1 tensor.*{EXPERT}.3.down_proj.weight.*\(64, 32\)"):
        load_checkpoint(ckpt, "cpu")


def test_tensor_missing_from_its_shard_names_the_shard(ckpt):
    shard = _rewrite_shard(ckpt, "lm_head.weight", lambda t: t.pop("lm_head.weight"))
    with pytest.raises(CheckpointError, match=rf"{shard.name}: lacks lm_head.weight"):
        load_checkpoint(ckpt, "cpu")


def test_wrong_shape_names_file_tensor_and_expectation(ckpt):
    name = "model.layers.3.self_attn.k_proj.weight"
    shard = _rewrite_shard(ckpt, name, lambda t: t.update({name: t[name][:16].clone()}))
    with pytest.raises(CheckpointError, match=rf"{shard.name}: tensor '{name}' is torch.float32 \(16, 64\), "
                                              rf"expected torch.float32 \(32, 64\)"):
        load_checkpoint(ckpt, "cpu")


def test_wrong_dtype_expert_is_rejected(ckpt):
    name = f"{EXPERT}.0.gate_proj.weight"
    _rewrite_shard(ckpt, name, lambda t: t.update({name: t[name].float()}))
    with pytest.raises(CheckpointError, match=rf"'{name}' is torch.float32 .* expected torch.float8_e4m3fn"):
        load_checkpoint(ckpt, "cpu")


def test_unexpected_tensor_is_rejected(ckpt):
    index = json.loads((ckpt / INDEX_FILE).read_text())
    shard = index["weight_map"]["lm_head.weight"]
    index["weight_map"]["lm_head.bias"] = shard
    (ckpt / INDEX_FILE).write_text(json.dumps(index))
    _rewrite_shard(ckpt, "lm_head.weight", lambda t: t.update({"lm_head.bias": torch.zeros(576)}))
    with pytest.raises(CheckpointError, match=rf"{shard}: unexpected tensor\(s\) for drama3-tiny: lm_head.bias"):
        load_checkpoint(ckpt, "cpu")


def test_missing_files_name_what_a_checkpoint_needs(ckpt, tmp_path):
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_checkpoint(tmp_path / "nowhere", "cpu")
    next(ckpt.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-.*: shard listed in model.safetensors.index.json"):
        load_checkpoint(ckpt, "cpu")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c["text_config"].pop("hidden_size"), r"text_config: missing required key 'hidden_size'"),
    (lambda c: c["audio_decoder"].update(n_local_heads=1),
     r"audio_decoder: \(n_head, n_local_heads, head_dim, dim\) = \(4, 1, 16, 64\) must equal"),
    (lambda c: c["text_config"]["layer_types"].reverse(),
     r"layer_types must be 'full_attention' where \(i \+ 1\) % 4 == 0"),
    (lambda c: c["quantization_config"].update(fmt="e5m2"), r"'fmt' must be one of \['e4m3'\]"),
    (lambda c: c["text_config"].update(vocab_size=600), r"vocab_size 600 must equal semantic_start_token_id 512"),
    (lambda c: c["codec_config"].update(hop=512), r"codec_config: unknown keys \['hop'\]"),
    (lambda c: c["text_config"].update(num_experts="8"), r"'num_experts' must be int, got '8'"),
    (lambda c: c["text_config"].update(moe_intermediate_size=40),
     r"BackboneConfig requires `assert .*moe_intermediate_size % self.fp8_block == 0`"),
])
def test_bad_config_json_is_rejected_with_the_reason(ckpt, edit, message):
    _edit_config(ckpt, edit)
    with pytest.raises(CheckpointError, match=rf"config.json: .*{message}"):
        load_checkpoint(ckpt, "cpu")


def test_config_json_that_is_not_json(ckpt):
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
        load_checkpoint(ckpt, "cpu")


def test_hf_variants_parse_to_the_same_config():
    full = get_config("drama3")
    raw = json.loads(json.dumps(to_hf_config(full, torch.bfloat16)))
    assert from_hf_config(raw, Path("/ckpts/x/config.json")) == (full, torch.bfloat16)
    text = raw["text_config"]
    del text["full_attention_interval"], raw["codec_config"], raw["serving"]  # layer_types; S2-Pro codec; defaults
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": text.pop("rope_theta"),
                               "partial_rotary_factor": text.pop("partial_rotary_factor")}
    text["initializer_range"] = 0.02  # real HF sections carry keys this runtime does not use
    raw["dtype"] = raw.pop("torch_dtype")
    assert from_hf_config(raw, Path("/ckpts/x/config.json")) == (full, torch.bfloat16)


def test_non_preset_geometry_is_named_after_its_directory():
    raw = to_hf_config(TINY, torch.float32)
    raw["text_config"]["num_experts"] = 16
    config, dtype = from_hf_config(raw, Path("/ckpts/wide-moe/config.json"))
    assert config.name == "wide-moe" and config.backbone.num_experts == 16 and dtype == torch.float32


def test_save_rejects_weights_that_do_not_match_the_config(tmp_path, tiny_weights):
    partial = {n: w for n, w in tiny_weights.items() if n != "model.norm.weight"}
    with pytest.raises(CheckpointError, match="missing: model.norm.weight"):
        save_checkpoint(TINY, partial, tmp_path / "bad")
    wrong = tiny_weights | {"model.norm.weight": torch.zeros(65)}
    with pytest.raises(CheckpointError, match=r"'model.norm.weight' is torch.float32 \(65,\), expected"):
        save_checkpoint(TINY, wrong, tmp_path / "bad")
