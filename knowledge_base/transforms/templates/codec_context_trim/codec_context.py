"""codec_context_trim's reach of the codec's convolutional stages (upsampling and conv decoder): how many frames of
the transformer's output before a frame can change that frame's samples. Every convolution is causal, so frames
further back change nothing: a window's left context needs the transformer (its attention reaches back a whole
window) but only this many frames of convolutions."""
from __future__ import annotations

import math

from reference_runtime.codec_weights import CONV_KERNEL, RESIDUAL_DILATIONS
from reference_runtime.config import CodecConfig


def context_frames(c: CodecConfig) -> int:
    """A causal convolution looks (kernel - 1) * dilation input samples back, a transposed one of kernel 2 * stride
    one input sample (one of kernel = stride none); summed in frames at each stage's samples per frame, rounded up,
    plus one frame for where a frame's first sample falls."""
    reach, rate = 0.0, 1  # frames; samples per frame at the current stage
    for factor in c.upsample_factors:  # transposed conv of kernel = stride, then ConvNeXt's depthwise conv
        rate *= factor
        reach += (CONV_KERNEL - 1) / rate
    reach += (CONV_KERNEL - 1) / rate  # the decoder's conv_in
    for r in c.decoder_rates:  # transposed conv of kernel 2r, then the dilated residual units
        reach += 1 / rate
        rate *= r
        reach += sum((CONV_KERNEL - 1) * d for d in RESIDUAL_DILATIONS) / rate
    reach += (CONV_KERNEL - 1) / rate  # conv_out
    return math.ceil(reach) + 1
