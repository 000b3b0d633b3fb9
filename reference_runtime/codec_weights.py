"""The codec's weight names, shapes and seeded init (every key starts with `codec.`; read by `model/codec.py`).

Scales follow fan-in so every stage keeps roughly unit RMS and the tanh output is a loud but mostly unclipped
waveform; Snake alphas start near 1 and biases near 0, noisy so a swapped tensor changes the audio.
"""
from __future__ import annotations

import math
import torch

from .api import Weights
from .config import CodecConfig
from .init_spec import Init, WeightSpec, draw

PREFIX = "codec."
CONV_KERNEL = 7
RESIDUAL_DILATIONS = (1, 3, 9)
CONVNEXT_EXPANSION = 4
# Gains below 1 offset the RMS that Snake and the residual units add, so each decoder block keeps ~unit RMS;
# the output gain puts the pre-tanh waveform at ~0.3 RMS: audible, rarely clipped.
BLOCK_GAIN = 0.6
RESIDUAL_GAIN = 0.5
OUTPUT_GAIN = 0.5


def _spec(shape: tuple[int, ...], std: float, mean: float = 0.0) -> WeightSpec:
    return WeightSpec(shape, "compute", Init(std=std, mean=mean))


def _bias(dim: int) -> WeightSpec:
    return _spec((dim,), 0.02)


def _gain(dim: int, mean: float = 1.0) -> WeightSpec:
    return _spec((dim,), 0.1 * mean, mean)


def _rms_norm(dim: int) -> WeightSpec:
    return _spec((dim,), 0.1)  # zero-centred gain 1 + w, as in the backbone


def _conv(prefix: str, c_out: int, c_in: int, kernel: int, gain: float = 1.0) -> dict[str, WeightSpec]:
    return {f"{prefix}.weight": _spec((c_out, c_in, kernel), gain / math.sqrt(c_in * kernel)),
            f"{prefix}.bias": _bias(c_out)}


def _linear(prefix: str, d_out: int, d_in: int, gain: float = 1.0, bias: bool = False) -> dict[str, WeightSpec]:
    specs = {f"{prefix}.weight": _spec((d_out, d_in), gain / math.sqrt(d_in))}
    return specs | {f"{prefix}.bias": _bias(d_out)} if bias else specs


def _quantizer(c: CodecConfig) -> dict[str, WeightSpec]:
    gain = 1 / math.sqrt(1 + c.residual_codebooks)  # the 10 projected codes sum to ~unit RMS
    books = [("quantizer.semantic", c.semantic_codebook_size)]
    books += [(f"quantizer.residual.{k}", c.residual_codebook_size) for k in range(c.residual_codebooks)]
    specs: dict[str, WeightSpec] = {}
    for prefix, size in books:
        specs[f"{prefix}.codebook.weight"] = _spec((size, c.codebook_dim), 1.0)
        specs |= _linear(f"{prefix}.out_proj", c.latent_dim, c.codebook_dim, gain, bias=True)
    return specs


def _post_module(c: CodecConfig) -> dict[str, WeightSpec]:
    d, out_gain = c.latent_dim, 1 / math.sqrt(2 * c.transformer_layers)
    specs: dict[str, WeightSpec] = {}
    for i in range(c.transformer_layers):
        p = f"post_module.layers.{i}"
        specs[f"{p}.attention_norm.weight"] = _rms_norm(d)
        specs |= _linear(f"{p}.attention.wqkv", 3 * d, d) | _linear(f"{p}.attention.wo", d, d, out_gain)
        specs[f"{p}.ffn_norm.weight"] = _rms_norm(d)
        specs |= _linear(f"{p}.feed_forward.w1", c.transformer_ffn, d)
        specs |= _linear(f"{p}.feed_forward.w3", c.transformer_ffn, d)
        specs |= _linear(f"{p}.feed_forward.w2", d, c.transformer_ffn, out_gain)
    specs["post_module.norm.weight"] = _rms_norm(d)
    return specs


def _upsample(c: CodecConfig) -> dict[str, WeightSpec]:
    d, hidden = c.latent_dim, CONVNEXT_EXPANSION * c.latent_dim
    specs: dict[str, WeightSpec] = {}
    for j, factor in enumerate(c.upsample_factors):
        p = f"upsample.{j}"
        # ConvTranspose1d weights are (in, out, kernel); kernel == stride, so each output sees one input frame
        specs[f"{p}.conv.weight"] = _spec((d, d, factor), 1 / math.sqrt(d))
        specs[f"{p}.conv.bias"] = _bias(d)
        specs |= _conv(f"{p}.convnext.dwconv", d, 1, CONV_KERNEL)
        specs[f"{p}.convnext.norm.weight"] = _gain(d)
        specs[f"{p}.convnext.norm.bias"] = _bias(d)
        specs |= _linear(f"{p}.convnext.pwconv1", hidden, d, bias=True)
        specs |= _linear(f"{p}.convnext.pwconv2", d, hidden, bias=True)
        specs[f"{p}.convnext.gamma"] = _gain(d, mean=0.5)
    return specs


def decoder_channels(c: CodecConfig) -> list[int]:
    """Channels entering each decoder block, then the last block's output (full: 1536, 768, 384, 192, 96)."""
    return [c.decoder_dim // 2**b for b in range(len(c.decoder_rates) + 1)]


def _decoder(c: CodecConfig) -> dict[str, WeightSpec]:
    channels = decoder_channels(c)
    specs = _conv("decoder.conv_in", channels[0], c.latent_dim, CONV_KERNEL)
    for b, rate in enumerate(c.decoder_rates):
        p, c_in, c_out = f"decoder.blocks.{b}", channels[b], channels[b + 1]
        specs[f"{p}.snake.alpha"] = _gain(c_in)
        # kernel 2 * stride: each output sample sums two input frames, hence the fan-in of 2 * c_in
        specs[f"{p}.conv_t.weight"] = _spec((c_in, c_out, 2 * rate), BLOCK_GAIN / math.sqrt(2 * c_in))
        specs[f"{p}.conv_t.bias"] = _bias(c_out)
        for u in range(len(RESIDUAL_DILATIONS)):
            r = f"{p}.res_units.{u}"
            specs[f"{r}.snake1.alpha"] = _gain(c_out)
            specs |= _conv(f"{r}.conv1", c_out, c_out, CONV_KERNEL)
            specs[f"{r}.snake2.alpha"] = _gain(c_out)
            specs |= _conv(f"{r}.conv2", c_out, c_out, 1, gain=RESIDUAL_GAIN / math.sqrt(len(RESIDUAL_DILATIONS)))
    specs["decoder.snake_out.alpha"] = _gain(channels[-1])
    specs |= _conv("decoder.conv_out", 1, channels[-1], CONV_KERNEL, gain=OUTPUT_GAIN)
    return specs


def codec_weight_shapes(c: CodecConfig) -> dict[str, WeightSpec]:
    """Every codec tensor (name -> shape, init), in forward order; `Codec` has exactly these parameters."""
    specs = _quantizer(c) | _post_module(c) | _upsample(c) | _decoder(c)
    return {PREFIX + name: spec for name, spec in specs.items()}


def init_codec_weights(c: CodecConfig, seed: int, device: torch.device | str, dtype: torch.dtype) -> Weights:
    """Deterministic for (config, seed, device): each tensor from its own generator seeded by (seed, name)."""
    device = torch.device(device)
    return {name: draw(name, spec, seed, device, dtype) for name, spec in codec_weight_shapes(c).items()}
