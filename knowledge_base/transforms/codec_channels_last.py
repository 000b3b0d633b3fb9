"""codec_channels_last: the codec's conv decoder run on (B, C, 1, T) channels-last activations with (out, in, 1, k)
channels-last weights, the layout cuDNN's convolution kernels take as they are, instead of 1-D NCW tensors that
cuDNN converts to NHWC before each convolution and back after.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

CODEC = "codec.py"
_CONV = '''\
        left = (self.kernel_size[0] - 1) * self.dilation[0]
        return super().forward(F.pad(x, (left, 0)))
'''
_CONV_T = "        return super().forward(x)[..., : x.shape[-1] * self.stride[0]]\n"
_SNAKE = "        alpha = self.alpha[:, None]\n"
_UNIT_CONV = "        self.conv2 = nn.Conv1d(channels, channels, 1)\n"
_DECODER = '''\
        x = self.conv_in(x)
        for block in self.blocks:
            x = block(x)
        return torch.tanh(self.conv_out(self.snake_out(x)))
'''
_BUILT = "        return codec.eval().requires_grad_(False)\n"


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, CODEC, _CONV, '''\
        left = (self.kernel_size[0] - 1) * self.dilation[0]
        if x.dim() == 4:  # codec_channels_last: (B, C, 1, T) activations, (out, in, 1, k) weights
            return F.conv2d(F.pad(x, (left, 0)), self.weight, self.bias, (1, self.stride[0]), 0,
                            (1, self.dilation[0]), self.groups)
        return super().forward(F.pad(x, (left, 0)))
'''),
        replace_once(files, CODEC, _CONV_T, '''\
        if x.dim() == 4:  # codec_channels_last
            y = F.conv_transpose2d(x, self.weight, self.bias, (1, self.stride[0]), (0, self.padding[0]),
                                   (0, self.output_padding[0]), self.groups, (1, self.dilation[0]))
        else:
            y = super().forward(x)
        return y[..., : x.shape[-1] * self.stride[0]]
'''),
        replace_once(files, CODEC, _SNAKE, "        alpha = self.alpha.view(-1, *(1,) * (x.dim() - 2))  # (C, 1), or "
                                           "(C, 1, 1) in codec_channels_last's decoder\n"),
        replace_once(files, CODEC, _UNIT_CONV, "        self.conv2 = CausalConv1d(channels, channels, 1)  # "
                                               "codec_channels_last: one that takes 4-D inputs\n"),
        replace_once(files, CODEC, _DECODER, '''\
        # codec_channels_last: (B, C, 1, T) channels-last from here on, as the weights (to_channels_last)
        x = self.conv_in(x.unsqueeze(2).contiguous(memory_format=torch.channels_last))
        for block in self.blocks:
            x = block(x)
        return torch.tanh(self.conv_out(self.snake_out(x))).squeeze(2)

    def to_channels_last(self) -> None:
        """Each convolution's weight as (out, in, 1, k) channels-last (codec_channels_last)."""
        for m in self.modules():
            if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
                weight = m.weight.detach().unsqueeze(2).contiguous(memory_format=torch.channels_last)
                m.weight = nn.Parameter(weight, requires_grad=False)
'''),
        replace_once(files, CODEC, _BUILT, "        codec.decoder.to_channels_last()\n" + _BUILT),
    ]


codec_channels_last = Transform(
    name="codec_channels_last",
    # measured on an H100 (session 25, docs/benchmarks.md; scripts/gpu_codec_profile.py --inductor --plus
    # codec_conv_autotune [--plus codec_channels_last], each in its own process): the 1-, 24- and 96-frame windows
    # 1.31 / 2.36 / 5.59 -> 0.88 / 1.62 / 3.71 ms, ~8 ms of a 200-frame stream's windows, whose time a stream pays
    # about in full (~1.5%), and 0.43 ms of time to first audio (~1.02x); in a 200-frame stream side by side, with
    # codec_conv_autotune, beyond-decode time fell from 29-34 to 16-20 ms (+2.8% frames/s)
    impact={"cuda": 1.02},
    first_audio={"cuda": 1.02},
    summary="run the codec's conv decoder on channels-last (B, C, 1, T) activations and (out, in, 1, k) weights, "
            "which cuDNN's kernels take as they are, dropping the layout conversions around every convolution",
    feature="codec",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    # under cuDNN's heuristics some channels-last window lengths ran 15-20x slower (20 / 32 / 40 / 96 frames:
    # 57-106 ms a window, session 25): only timed algorithms make the layout pay
    requires=("codec_conv_autotune",),
    lesson="cuDNN's fast convolution kernels are NHWC; 1-D NCW activations (and weights) are converted before each "
           "of the decoder's ~30 convolutions and back after: ~40 conversion kernels a window whatever its length. "
           "As 2-D convolutions over a height of 1 with channels-last tensors, they run without them; inductor "
           "follows the weights' layout when it lays out the fused Snake activations between convolutions. The "
           "transposed convolutions and the 1-wide ones take the same route; the upsampling stages stay 1-D. Only with "
           "codec_conv_autotune: cuDNN's heuristics ran some channels-last window lengths 15-20x slower (H100).",
)
