"""CodecStage: the codec on its own device and the hand-off of codes to it (the seed's 2-GPU setup runs generation
on one GPU and the codec on another).

Codes made on the generation GPU reach the codec GPU by a peer copy, never through the host. The codec runs on a
stream of its own device that waits on an event recorded on the generation stream at the hand-off, so only the
work queued before the hand-off gates the decode (no device-wide synchronize). Codes from the host (the harness's
decode_audio calls), on the codec's own device, or on CPU simply move with `.to()`, a no-op when already there.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

from .codec import Codec


def is_peer_hand_off(source: torch.device, codec_device: torch.device) -> bool:
    """Codes on one CUDA device for a codec on another: the case that needs the event and the codec stream."""
    return source.type == codec_device.type == "cuda" and source != codec_device


class CodecStage:
    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        # from the parameters, not the caller's spelling: "cuda" and "cuda:0" must compare equal to codes' devices
        self.device = next(codec.parameters()).device
        self._stream: torch.cuda.Stream | None = None  # made on the first peer hand-off: one-device engines never do

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(10, n) int64 codes on any device -> (n * frame_samples,) float32 waveform on CPU."""
        # the codec's GPU made current: streams, graph captures and pools that the codec makes belong to it
        with torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext():
            if not is_peer_hand_off(codes.device, self.device):
                return self.codec.decode(codes.to(self.device))
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(codes.device))
            if self._stream is None:
                self._stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(self._stream):
                self._stream.wait_event(ready)
                return self.codec.decode(codes.to(self.device, non_blocking=True))
