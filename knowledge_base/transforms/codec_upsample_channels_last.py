"""codec_upsample_channels_last: the codec's two upsampling stages (a transposed convolution and a ConvNeXt block
each) on the same (B, C, 1, T) channels-last activations and (out, in, 1, k) weights as codec_channels_last's
decoder, from the post-module's output on: (B, n, C) rows are already that layout, so no copy is made before the
decoder, cuDNN converts neither activations nor weights around the upsampling convolutions, and the ConvNeXt's
LayerNorm and linear layers read (B, 1, T, C) views instead of transposed copies.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

CODEC = "codec.py"
_CONVNEXT = '''\
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        y = self.norm(self.dwconv(x).transpose(1, 2))
'''
_POST = "        x = self.post_module(self.quantizer(codes)).transpose(1, 2)\n"
_DECODER_IN = "        x = self.conv_in(x.unsqueeze(2).contiguous(memory_format=torch.channels_last))\n"
_WEIGHTS = "        codec.decoder.to_channels_last()\n"


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, CODEC, _CONVNEXT, '''\
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        if x.dim() == 4:  # codec_upsample_channels_last: (B, C, 1, T) channels-last, so (B, 1, T, C) is a view
            y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
            y = self.pwconv2(F.gelu(self.pwconv1(y))) * self.gamma
            return x + y.permute(0, 3, 1, 2)
        y = self.norm(self.dwconv(x).transpose(1, 2))
'''),
        replace_once(files, CODEC, _POST, '''\
        # codec_upsample_channels_last: the (B, n, C) rows as (B, C, 1, n), a channels-last view
        x = self.post_module(self.quantizer(codes)).transpose(1, 2).unsqueeze(2)
'''),
        replace_once(files, CODEC, _DECODER_IN, '''\
        x = self.conv_in(x)  # codec_upsample_channels_last: (B, C, 1, T) channels-last already
'''),
        replace_once(files, CODEC, _WEIGHTS, _WEIGHTS + '''\
        for stage in codec.upsample:  # codec_upsample_channels_last: its convolutions' weights too
            Decoder.to_channels_last(stage)
'''),
    ]


codec_upsample_channels_last = Transform(
    name="codec_upsample_channels_last",
    # measured on an H100 (session 30, docs/benchmarks.md), beside codec_channels_last alone on the kept engine:
    # codec windows of 1 / 10 / 64 frames 1.142 / 1.484 / 2.887 -> 1.018 / 1.376 / 2.750 ms, TTFA 0.1-0.2 ms
    # shorter, frames/s +0.1% (a 200-frame stream decodes 8 windows, its first audio one); gated at full size
    # with triton_deltanet_chunks on the same stack (max logit error 0.156)
    impact={"cuda": 1.002},
    first_audio={"cuda": 1.007},
    proven=frozenset({"cuda"}),
    summary="run the codec's upsampling stages (transposed convolutions and ConvNeXt blocks) on codec_channels_last's "
            "channels-last (B, C, 1, T) layout too, from the post-module's output (already that layout), dropping the "
            "layout conversions cuDNN made around them in every window",
    feature="codec",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("codec_channels_last",),
    lesson="codec_channels_last left the two upsampling stages 1-D: cuDNN converted their activations and weights "
           "to NHWC and back in every codec window (3-5 kernels, 0.10-0.14 ms on an H100, the first audio's window "
           "included). The post-module's (B, n, C) output is already the channels-last (B, C, 1, n) layout, so the "
           "whole path from there to the waveform can stay channels-last without a copy; the ConvNeXt's LayerNorm "
           "and linear layers then read (B, 1, T, C) views. Expect a few tenths of a millisecond per stream.",
)
