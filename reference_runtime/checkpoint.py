"""HF-layout safetensors checkpoint: `config.json`, shards `model-0000k-of-0000n.safetensors`, and
`model.safetensors.index.json` mapping every tensor name to its shard.

On disk, routed experts are stored per expert as real HF FP8 checkpoints do
(`model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight` float8_e4m3fn + `.weight_scale_inv` fp32); loading
stacks them into the fused layout of docs/weights.md. Codec tensors ride in the same shards as float32 under their
`codec.` names (the real Drama 3 loads S2-Pro's codec.pth separately; that path is out of scope here).
"""
from __future__ import annotations

import json
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .api import Weights
from .codec_weights import codec_weight_shapes
from .config import Drama3Config, get_config
from .hf_config import CheckpointError, from_hf_config, to_hf_config
from .weights import SCALE_SUFFIX, codec_dtype, init_weights, weight_shapes

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
EXPERT_PARTS = {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}  # fused -> rows in order
SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
                      "F8_E4M3": torch.float8_e4m3fn}


@dataclass(frozen=True, slots=True)
class DiskTensor:
    """One tensor as stored: its shape and dtype, and where it lives in memory (`weights[source][expert, rows]`
    for a per-expert slice of a fused stack, `weights[source]` otherwise)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    source: str
    expert: int | None = None
    rows: slice | None = None

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * torch.Size(self.shape).numel()


def disk_layout(config: Drama3Config, dtype: torch.dtype) -> dict[str, DiskTensor]:
    """Every tensor a checkpoint of `config` (compute dtype `dtype`) must hold, by on-disk name."""
    layout: dict[str, DiskTensor] = {}
    for name, spec in weight_shapes(config).items():
        if spec.kind == "compute":
            layout[name] = DiskTensor(spec.shape, dtype, name)
            continue
        prefix, fused = name.removesuffix(SCALE_SUFFIX).rsplit(".", 1)  # "model.layers.3.mlp.experts", "down_proj"
        suffix = "weight_scale_inv" if spec.kind == "scale" else "weight"
        experts, rows, cols = spec.shape
        parts = EXPERT_PARTS[fused]
        part_rows = rows // len(parts)
        for e in range(experts):
            for k, part in enumerate(parts):
                layout[f"{prefix}.{e}.{part}.{suffix}"] = DiskTensor(
                    (part_rows, cols), spec.dtype(dtype), name, e, slice(k * part_rows, (k + 1) * part_rows))
    for name, spec in codec_weight_shapes(config.codec).items():
        layout[name] = DiskTensor(spec.shape, torch.float32, name)
    return layout


def _summarise(names: list[str], limit: int = 5) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _check_tensor(entry: DiskTensor, name: str, shape: tuple[int, ...], dtype: torch.dtype | str, where: str) -> None:
    if shape != entry.shape or dtype != entry.dtype:
        raise CheckpointError(f"{where}: tensor {name!r} is {dtype} {shape}, expected {entry.dtype} {entry.shape}")


def _check_in_memory(config: Drama3Config, weights: Weights) -> torch.dtype:
    """The in-memory layout of docs/weights.md, or a CheckpointError; returns the compute dtype."""
    specs = weight_shapes(config)
    codec = codec_weight_shapes(config.codec)
    missing, unexpected = sorted(set(specs) - set(weights)), sorted(set(weights) - set(specs) - set(codec))
    missing += sorted(set(codec) - set(weights))
    if missing or unexpected:
        raise CheckpointError(f"save_checkpoint: weights do not match {config.name}'s names (docs/weights.md); "
                              f"missing: {_summarise(missing) or '-'}; unexpected: {_summarise(unexpected) or '-'}")
    reference = weights["model.embed_tokens.weight"]
    expected = {name: (spec.shape, spec.dtype(reference.dtype)) for name, spec in specs.items()}
    expected |= {name: (spec.shape, codec_dtype(reference.device, reference.dtype)) for name, spec in codec.items()}
    for name, (shape, dtype) in expected.items():
        if tuple(weights[name].shape) != shape or weights[name].dtype != dtype:
            raise CheckpointError(f"save_checkpoint: {name!r} is {weights[name].dtype} "
                                  f"{tuple(weights[name].shape)}, expected {dtype} {shape}")
    return reference.dtype


def _plan_shards(layout: dict[str, DiskTensor], max_shard_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    shard_bytes = 0
    for name, entry in layout.items():
        if shards[-1] and shard_bytes + entry.nbytes > max_shard_bytes:
            shards.append([])
            shard_bytes = 0
        shards[-1].append(name)
        shard_bytes += entry.nbytes
    return shards


def save_checkpoint(config: Drama3Config, weights: Weights, path: Path | str,
                    max_shard_bytes: int = 5 * 2**30) -> None:
    """Write `weights` (the in-memory layout of docs/weights.md) as an HF-layout checkpoint directory."""
    path = Path(path)
    dtype = _check_in_memory(config, weights)
    layout = disk_layout(config, dtype)
    shards = _plan_shards(layout, max_shard_bytes)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(to_hf_config(config, dtype), indent=2) + "\n")
    weight_map = {}
    for k, names in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name in names:
            entry = layout[name]
            source = weights[entry.source]
            value = source if entry.expert is None else source[entry.expert, entry.rows]
            tensors[name] = value.detach().to("cpu", entry.dtype, copy=True)  # copies never share storage
            weight_map[name] = file
        save_file(tensors, path / file, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(entry.nbytes for entry in layout.values())}, "weight_map": weight_map}
    (path / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def read_config(path: Path | str) -> tuple[Drama3Config, torch.dtype]:
    """config.json of a checkpoint directory -> (Drama3Config, stored compute dtype)."""
    source = Path(path) / CONFIG_FILE
    if not source.is_file():
        raise CheckpointError(f"{source}: not found; a checkpoint directory needs {CONFIG_FILE}, {INDEX_FILE} "
                              f"and its shards (write one with reference_runtime.checkpoint.save_checkpoint)")
    try:
        raw = json.loads(source.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{source}: not valid JSON ({exc})") from exc
    return from_hf_config(raw, source)


def _read_index(path: Path) -> dict[str, str]:
    source = path / INDEX_FILE
    if not source.is_file():
        raise CheckpointError(f"{source}: not found; it maps every tensor name to its shard file")
    try:
        weight_map = json.loads(source.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{source}: needs a JSON object with a 'weight_map' of name -> file ({exc!r})") from exc
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{source}: 'weight_map' must map tensor names to shard file names")
    for file in sorted(set(weight_map.values())):
        if not (path / file).is_file():
            raise CheckpointError(f"{path / file}: shard listed in {INDEX_FILE} is missing")
    return weight_map


def load_checkpoint(path: Path | str, device: torch.device | str) -> tuple[Drama3Config, Weights]:
    """Validate and load a checkpoint directory onto `device`, stacking per-expert tensors into fused stacks."""
    path, device = Path(path), torch.device(device)
    config, dtype = read_config(path)
    layout = disk_layout(config, dtype)
    weight_map = _read_index(path)
    missing = sorted(set(layout) - set(weight_map))
    if missing:
        entry = layout[missing[0]]
        raise CheckpointError(f"{path / INDEX_FILE}: missing {len(missing)} tensor(s) for {config.name}: "
                              f"{_summarise(missing)} (e.g. {missing[0]!r} should be {entry.dtype} {entry.shape})")
    unexpected = sorted(set(weight_map) - set(layout))
    if unexpected:
        raise CheckpointError(f"{path / weight_map[unexpected[0]]}: unexpected tensor(s) for {config.name}: "
                              f"{_summarise(unexpected)}")
    by_file: dict[str, list[str]] = defaultdict(list)
    for name, file in weight_map.items():
        by_file[file].append(name)
    with ExitStack() as stack:
        handles = {file: stack.enter_context(safe_open(path / file, framework="pt", device=str(device)))
                   for file in by_file}
        for file, names in by_file.items():
            stored = set(handles[file].keys())
            absent = sorted(set(names) - stored)
            if absent:
                raise CheckpointError(f"{path / file}: lacks {_summarise(absent)}, which {INDEX_FILE} assigns to it")
            for name in names:
                meta = handles[file].get_slice(name)
                stored_dtype = SAFETENSORS_DTYPES.get(meta.get_dtype(), meta.get_dtype())
                _check_tensor(layout[name], name, tuple(meta.get_shape()), stored_dtype, str(path / file))
        return config, _assemble(config, dtype, layout, weight_map, handles, device)


def _assemble(config: Drama3Config, dtype: torch.dtype, layout: dict[str, DiskTensor], weight_map: dict[str, str],
              handles: dict, device: torch.device) -> Weights:
    weights: Weights = {}
    for name, spec in weight_shapes(config).items():
        if spec.kind != "compute":  # a fused expert stack, filled expert by expert below
            weights[name] = torch.empty(spec.shape, dtype=spec.dtype(dtype), device=device)
    for name, entry in layout.items():
        tensor = handles[weight_map[name]].get_tensor(name)
        if entry.expert is not None:
            weights[entry.source][entry.expert, entry.rows] = tensor
        elif name.startswith("codec."):
            weights[name] = tensor.to(codec_dtype(device, dtype))
        else:
            weights[name] = tensor
    order = [*weight_shapes(config), *codec_weight_shapes(config.codec)]
    return {name: weights[name] for name in order}


def model_weights(config_name: str, source: str, seed: int, device: torch.device | str
                  ) -> tuple[Drama3Config, Weights]:
    """The weights a target's model names: `source` "random" = init_weights(config, seed), else a checkpoint
    directory, which must hold that config."""
    config = get_config(config_name)
    if source == "random":
        return config, init_weights(config, seed, device)
    loaded, weights = load_checkpoint(source, device)
    if loaded.name != config.name:
        raise ValueError(f"checkpoint {source} is {loaded.name}, the target says {config.name}")
    return loaded, weights
