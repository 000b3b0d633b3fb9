"""GraphedCodec: the codec with each decode length replayed from a CUDA graph. n frames run the graph of the
smallest ladder length L >= n on the codes zero-padded to L, keeping the first n * frame_samples samples: every
codec op is causal, so the padding cannot change them. Longer decodes (and CPU) run eagerly.
"""
from __future__ import annotations

import torch

from .codec import Codec
from .codec_graph_params import LADDER, MAX_GRAPH_FRAMES
from .graph_capture import capture

CAPTURE_PRIORITY = -2  # the frames' streams take priorities 0 (captures, pipelined_frames) and -1 (codec_overlap)


def ladder_length(frames: int) -> int:
    """The smallest ladder length >= frames: powers of two, plus 3 * 2^i between them when LADDER is "pow2_3"."""
    length = 1
    while length < frames:
        if LADDER == "pow2_3" and length >= 2 and length * 3 // 2 >= frames:
            return length * 3 // 2
        length *= 2
    return length


class GraphedCodec(Codec):
    def __init__(self, c) -> None:
        super().__init__(c)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self._pool: tuple | None = None
        # the codec's own capture stream: its windows may replay beside the frame graphs (codec_overlap), which the
        # default capture stream recorded, and graphs of one capture stream share a cuBLAS workspace (on an H100,
        # drama3-mid streams drew other frames from one run to the next). torch hands out streams of one priority
        # from a pool of 32 in turn, so one of a priority no capture or replay of the frames takes
        self._capture_stream: torch.cuda.Stream | None = None

    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # (B, 10, n) -> (B, n * frame_samples)
        n = codes.shape[-1]
        if codes.device.type != "cuda" or codes.shape[0] != 1 or n > MAX_GRAPH_FRAMES:
            return super().forward(codes)
        graph, padded, audio = self._graph(ladder_length(n), codes)
        padded[..., n:].zero_()
        padded[..., :n].copy_(codes)
        graph.replay()
        return audio[:, :n * self.config.frame_samples].clone()  # the graph's output is overwritten by the next replay

    def _graph(self, length: int, like: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        if length not in self._graphs:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
                self._capture_stream = torch.cuda.Stream(like.device, priority=CAPTURE_PRIORITY)
            padded = torch.zeros((1, like.shape[1], length), dtype=like.dtype, device=like.device)
            graph, audio = capture(lambda: Codec.forward(self, padded), self._pool, stream=self._capture_stream)
            self._graphs[length] = (graph, padded, audio)
        return self._graphs[length]
