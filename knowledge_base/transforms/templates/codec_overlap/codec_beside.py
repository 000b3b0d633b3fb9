"""CodecBeside: a stream's codec windows decoded on a side CUDA stream of the codec's device while the frame graphs
go on, each window's audio handed over one sync point later.

CodecStage.decode blocks the host until the window's waveform is on the CPU (its range check and copy read the
device), so the next frames are only queued once the codec is done: each window's decode adds to the stream's
time. Here `start` only queues the window (codes range check, graph replay, waveform) behind an event recorded on
the generation stream, and `finish` waits for that work alone. The audio is the same codec's on the same codes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_runtime.api import AudioChunk

from .codec import Codec


@dataclass
class Window:
    """A queued codec window: the tensors its device work reads and writes stay referenced until `finish`."""

    window: torch.Tensor  # (frames, 11) on the generation device: the frames the codec re-decodes
    skip: int  # leading frames of left context, decoded but not emitted
    start: int
    end: int
    out_of_range: torch.Tensor  # device bool: a code outside its codebook
    audio: torch.Tensor  # (frames * frame_samples,) float32 on the codec's device
    done: torch.cuda.Event | None  # None on CPU, where the window was decoded in `start`


class CodecBeside:
    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self.device = next(codec.parameters()).device
        # the default (lowest) priority: the engine's frame graphs run on a stream of higher priority
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        c = codec.config
        # made once: a host-to-device copy inside `start` would wait for the frames the side stream waits for
        self._sizes = torch.tensor([c.semantic_codebook_size] + [c.residual_codebook_size] * c.residual_codebooks,
                                   device=self.device)[:, None]

    def start(self, window: torch.Tensor, skip: int, start: int, end: int) -> Window:
        codes = window[:, 1:].T
        if self._stream is None:
            bad, audio = self._decode(codes)
            return Window(window, skip, start, end, bad, audio, None)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(window.device))
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
            self._stream.wait_event(ready)
            bad, audio = self._decode(codes.to(self.device, non_blocking=True))
            done = torch.cuda.Event()
            done.record(self._stream)
        return Window(window, skip, start, end, bad, audio, done)

    def finish(self, w: Window, frame_samples: int) -> AudioChunk:
        if w.done is None:
            return self._chunk(w, frame_samples)
        w.done.synchronize()
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):  # reads behind the window's work only
            return self._chunk(w, frame_samples)

    @staticmethod
    def _chunk(w: Window, frame_samples: int) -> AudioChunk:
        if bool(w.out_of_range):
            raise ValueError(f"codec codes out of range in frames {w.start}..{w.end}: each codebook's codes must be "
                             "below its size")
        return AudioChunk(audio=w.audio[w.skip * frame_samples:].cpu(), frame_start=w.start, frame_end=w.end,
                          frames=w.window[w.skip:].cpu())

    # in inference mode as Codec.decode: a graphed codec keeps static input buffers per window length, made by
    # whichever call comes first (an inference tensor under decode_audio), which a later call outside inference
    # mode may not write into
    @torch.inference_mode()
    def _decode(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(out-of-range flag, waveform) of (10, n) int64 codes, both left on the device: Codec.decode without
        its host reads."""
        bad = ((codes >= self._sizes) | (codes < 0)).any()
        # the embedding lookups must not index out of bounds before the flag is read: clamp, then report
        safe = torch.minimum(codes.clamp(min=0), self._sizes - 1)
        return bad, self.codec(safe[None])[0].float()
