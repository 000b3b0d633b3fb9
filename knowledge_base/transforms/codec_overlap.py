"""codec_overlap: a stream's codec windows after the first decoded on a side CUDA stream beside the next frames'
graphs, each handed over at the next sync point, instead of the host waiting for each window before it queues
more frames; the frame graphs replay on a stream of higher priority, so the codec's kernels take only what the
frame leaves idle. The helper lives in templates/codec_overlap/.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once, template_files

ENGINE = "graph_engine.py"
_STREAM = '''\
        frames: list[torch.Tensor] = []
        emitted = 0
        for block in self._blocks(request, ends):
            frames.extend(block.unbind(0))
            if len(frames) in ends and len(frames) > emitted:
                yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)
                emitted = len(frames)
        if len(frames) > emitted:
            yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)
'''
_OVERLAPPED = '''\
        frames: list[torch.Tensor] = []
        emitted, queued = 0, None
        for block in self._blocks(request, ends):
            frames.extend(block.unbind(0))
            if queued is not None:  # decoded beside this block's frames
                yield self._beside.finish(queued, self.config.codec.frame_samples)
                queued = None
            if len(frames) in ends and len(frames) > emitted:
                if emitted == 0:  # time to first audio: no frames to overlap the first window with
                    yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)
                else:
                    queued = self._queue(frames, emitted, len(frames), schedule.overlap_frames)
                emitted = len(frames)
        if queued is not None:
            yield self._beside.finish(queued, self.config.codec.frame_samples)
        if len(frames) > emitted:
            yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)

    def _queue(self, frames: list[torch.Tensor], start: int, end: int, overlap: int | None) -> Window:
        """The chunk's codec window queued on the side stream (the same window as _chunk decodes)."""
        first = 0 if overlap is None else max(0, start - overlap)
        return self._beside.start(torch.stack(frames[first:end]), start - first, start, end)
'''
_FIELD = "        self._forcing = False\n"
_REPLAY = "            self._graph(kind, span, self._sampling).replay()\n"
_URGENT = '''\
            # on a stream of higher priority than the codec's: as the codec's blocks retire, the frame's kernels
            # get the freed SMs first, so the codec fills what the latency-bound frame leaves idle
            graph, urgent, current = self._graph(kind, span, self._sampling), self._urgent, torch.cuda.current_stream()
            urgent.wait_stream(current)
            with torch.cuda.stream(urgent):
                graph.replay()
            current.wait_stream(urgent)
'''


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        *template_files(files, "codec_overlap"),
        replace_once(files, ENGINE, "from .codec import Codec\n",
                     "from .codec import Codec\nfrom .codec_beside import CodecBeside, Window\n"),
        replace_once(files, ENGINE, _FIELD, _FIELD + """\
        self._beside = CodecBeside(codec)
        # torch's high priority: lower numbers come first
        self._urgent = torch.cuda.Stream(device, priority=-1) if self._pool is not None else None
"""),
        replace_once(files, ENGINE, _REPLAY, _URGENT),
        replace_once(files, ENGINE, _STREAM, _OVERLAPPED),
    ]


codec_overlap = Transform(
    name="codec_overlap",
    # measured on the H200 (session 15, docs/benchmarks.md): 64-frame streams 1.003-1.014x at full size, 1.034x
    # on drama3-mid, whose lighter frames leave the codec more of the GPU
    impact={"cuda": 1.01},
    summary="decode each streamed codec window after the first on a side CUDA stream while the next frames' "
            "graphs run, handing its audio over at the next sync point, so the host never waits for the codec "
            "before queuing frames",
    feature="codec",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_frame", "cuda_graph_codec"),
    lesson="CodecStage.decode reads the device twice (its range check and the waveform copy), so the host waits "
           "for each window before queuing more frames, and the window's decode adds to the stream's time. The "
           "first window is time to first audio and stays synchronous; the last has nothing after it to hide "
           "behind. The audio is the same codec's on the same codes; chunks arrive one sync point later. On the "
           "H200 the frame graphs needed a higher-priority stream: without one the codec's kernels took the SMs "
           "first and nothing was hidden (1.003x on drama3-mid, 1.034x with it); at full size the frame's "
           "kernels leave the codec little room (1.003-1.014x).",
)
