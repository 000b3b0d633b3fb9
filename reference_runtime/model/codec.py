"""DAC-style codec decoder: codes (10, n) -> n * 2048 samples of 44.1 kHz audio.

Residual-VQ dequantisation -> causal windowed transformer at frame rate -> 2 x (causal ConvTranspose + ConvNeXt)
upsampling -> conv decoder (Snake, causal ConvTranspose, dilated residual units) -> tanh. Every op is causal (left
padding only, transposed convs trimmed to stride * n), so sample t depends only on frames <= t // 2048 and a
decoded prefix equals the prefix of the full decode. Parameter names are `codec_weights.codec_weight_shapes`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from reference_runtime.api import Weights
from reference_runtime.codec_weights import (
    CONV_KERNEL, CONVNEXT_EXPANSION, PREFIX, RESIDUAL_DILATIONS, decoder_channels,
)
from reference_runtime.config import CodecConfig

from .layers import apply_rope, rms_norm, swiglu

NORM_EPS = 1e-6
# RoPE makes attention depend only on relative frame offsets: a chunk decoded with enough left context
# matches the full decode whatever its absolute start.
ROPE_THETA = 10000.0


class CausalConv1d(nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left = (self.kernel_size[0] - 1) * self.dilation[0]
        return super().forward(F.pad(x, (left, 0)))


class CausalConvTranspose1d(nn.ConvTranspose1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the tail past stride * n would need future frames to be complete: drop it
        return super().forward(x)[..., : x.shape[-1] * self.stride[0]]


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha, one alpha per channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[:, None]
        y = (alpha * x).sin_()
        return y.mul_(y).mul_((alpha + 1e-9).reciprocal()).add_(x)  # in place: the largest tensors of the decode


class RMSNorm(nn.Module):
    """Zero-centred gain (1 + w), as in the backbone."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, NORM_EPS)


class Codebook(nn.Module):
    def __init__(self, size: int, c: CodecConfig):
        super().__init__()
        self.codebook = nn.Embedding(size, c.codebook_dim)
        self.out_proj = nn.Linear(c.codebook_dim, c.latent_dim)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.codebook(codes))


class Dequantizer(nn.Module):
    """Code 0 from the semantic codebook, codes 1.. from the residual ones; their projections are summed."""

    def __init__(self, c: CodecConfig):
        super().__init__()
        self.semantic = Codebook(c.semantic_codebook_size, c)
        self.residual = nn.ModuleList(Codebook(c.residual_codebook_size, c) for _ in range(c.residual_codebooks))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # (B, 10, n) -> (B, n, latent)
        latent = self.semantic(codes[:, 0])
        for k, book in enumerate(self.residual):
            latent = latent + book(codes[:, k + 1])
        return latent


class WindowedAttention(nn.Module):
    def __init__(self, c: CodecConfig):
        super().__init__()
        self.heads, self.head_dim = c.transformer_heads, c.latent_dim // c.transformer_heads
        self.wqkv = nn.Linear(c.latent_dim, 3 * c.latent_dim, bias=False)
        self.wo = nn.Linear(c.latent_dim, c.latent_dim, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).view(b, t, 3, self.heads, self.head_dim).unbind(2)
        q = apply_rope(q, positions, self.head_dim, ROPE_THETA, interleaved=False)
        k = apply_rope(k, positions, self.head_dim, ROPE_THETA, interleaved=False)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, c: CodecConfig):
        super().__init__()
        self.w1 = nn.Linear(c.latent_dim, c.transformer_ffn, bias=False)  # gate
        self.w3 = nn.Linear(c.latent_dim, c.transformer_ffn, bias=False)  # up
        self.w2 = nn.Linear(c.transformer_ffn, c.latent_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swiglu(x, self.w1.weight, self.w3.weight, self.w2.weight)


class TransformerLayer(nn.Module):
    def __init__(self, c: CodecConfig):
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(c.latent_dim), WindowedAttention(c)
        self.ffn_norm, self.feed_forward = RMSNorm(c.latent_dim), FeedForward(c)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), positions, mask)
        return x + self.feed_forward(self.ffn_norm(x))


class PostModule(nn.Module):
    """Causal transformer over frames; each frame attends to itself and the window - 1 frames before it."""

    def __init__(self, c: CodecConfig):
        super().__init__()
        self.window = c.transformer_window
        self.layers = nn.ModuleList(TransformerLayer(c) for _ in range(c.transformer_layers))
        self.norm = RMSNorm(c.latent_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, n, latent)
        positions = torch.arange(x.shape[1], device=x.device)
        offset = positions[:, None] - positions[None, :]  # query - key
        mask = (offset >= 0) & (offset < self.window)
        for layer in self.layers:
            x = layer(x, positions, mask)
        return self.norm(x)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, CONV_KERNEL, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=NORM_EPS)
        self.pwconv1 = nn.Linear(dim, CONVNEXT_EXPANSION * dim)
        self.pwconv2 = nn.Linear(CONVNEXT_EXPANSION * dim, dim)
        self.gamma = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        y = self.norm(self.dwconv(x).transpose(1, 2))
        y = self.pwconv2(F.gelu(self.pwconv1(y))) * self.gamma
        return x + y.transpose(1, 2)


class UpsampleStage(nn.Module):
    def __init__(self, dim: int, factor: int):
        super().__init__()
        self.conv = CausalConvTranspose1d(dim, dim, factor, stride=factor)
        self.convnext = ConvNeXtBlock(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.convnext(self.conv(x))


class ResidualUnit(nn.Module):
    def __init__(self, channels: int, dilation: int):
        super().__init__()
        self.snake1 = Snake(channels)
        self.conv1 = CausalConv1d(channels, channels, CONV_KERNEL, dilation=dilation)
        self.snake2 = Snake(channels)
        self.conv2 = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.snake2(self.conv1(self.snake1(x))))


class DecoderBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, rate: int):
        super().__init__()
        self.snake = Snake(c_in)
        self.conv_t = CausalConvTranspose1d(c_in, c_out, 2 * rate, stride=rate)
        self.res_units = nn.ModuleList(ResidualUnit(c_out, d) for d in RESIDUAL_DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_t(self.snake(x))
        for unit in self.res_units:
            x = unit(x)
        return x


class Decoder(nn.Module):
    def __init__(self, c: CodecConfig):
        super().__init__()
        ch = decoder_channels(c)
        self.conv_in = CausalConv1d(c.latent_dim, ch[0], CONV_KERNEL)
        self.blocks = nn.ModuleList(DecoderBlock(ch[b], ch[b + 1], r) for b, r in enumerate(c.decoder_rates))
        self.snake_out = Snake(ch[-1])
        self.conv_out = CausalConv1d(ch[-1], 1, CONV_KERNEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, latent, T) -> (B, 1, T * prod(rates))
        x = self.conv_in(x)
        for block in self.blocks:
            x = block(x)
        return torch.tanh(self.conv_out(self.snake_out(x)))


class Codec(nn.Module):
    def __init__(self, c: CodecConfig):
        super().__init__()
        self.config = c
        self.quantizer = Dequantizer(c)
        self.post_module = PostModule(c)
        self.upsample = nn.ModuleList(UpsampleStage(c.latent_dim, f) for f in c.upsample_factors)
        self.decoder = Decoder(c)

    @classmethod
    def from_weights(cls, c: CodecConfig, weights: Weights, device: torch.device | str,
                     dtype: torch.dtype) -> Codec:
        """Build on the meta device and adopt the `codec.*` tensors (moved to device/dtype) as parameters."""
        with torch.device("meta"):
            codec = cls(c)
        state = {name[len(PREFIX):]: w for name, w in weights.items() if name.startswith(PREFIX)}
        expected = codec.state_dict()
        missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
        if missing or unexpected:
            raise ValueError(f"codec weights do not match the codec config: missing {missing[:5]}, unexpected "
                             f"{unexpected[:5]}; build them with codec_weights.init_codec_weights for this config")
        for name, t in expected.items():
            if state[name].shape != t.shape:
                raise ValueError(f"codec weight {PREFIX}{name} has shape {tuple(state[name].shape)}, expected "
                                 f"{tuple(t.shape)} for this codec config")
        codec.load_state_dict({k: w.to(device=device, dtype=dtype) for k, w in state.items()}, assign=True)
        return codec.eval().requires_grad_(False)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # (B, 10, n) -> (B, n * frame_samples)
        x = self.post_module(self.quantizer(codes)).transpose(1, 2)
        for stage in self.upsample:
            x = stage(x)
        return self.decoder(x)[:, 0]

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(10, n) int64 codes -> (n * 2048,) float32 waveform on CPU."""
        c = self.config
        if codes.ndim != 2 or codes.shape[0] != 1 + c.residual_codebooks:
            raise ValueError(f"codec codes must be ({1 + c.residual_codebooks}, frames), got {tuple(codes.shape)}")
        codes = codes.to(device=self.decoder.conv_out.weight.device, dtype=torch.long)
        if codes.shape[1] == 0:
            return torch.zeros(0)
        sizes = [c.semantic_codebook_size] + [c.residual_codebook_size] * c.residual_codebooks
        bad = codes >= torch.tensor(sizes, device=codes.device)[:, None]
        if bool((bad | (codes < 0)).any()):
            raise ValueError(f"codec codes out of range: codebook 0 needs [0, {sizes[0]}), codebooks 1.. need "
                             f"[0, {c.residual_codebook_size})")
        return self(codes[None])[0].float().cpu()
