"""codec_first_window_queued: the stream's first codec window (time to first audio) queued behind the prefill as
codec_overlap queues the later ones, instead of decoded through decode_audio. decode_audio's range check reads the
device, so the host waits there for the whole prefill and only then launches the window's copies and graph while
the GPU idles; queued, the window's work sits behind the prefill's kernels (its out-of-range flag read with the
audio), and the host waits once, for the audio.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

ENGINE = "graph_engine.py"
_FIRST = '''\
                if emitted == 0:  # time to first audio: no frames to overlap the first window with
                    yield self._chunk(frames, emitted, len(frames), schedule.overlap_frames)
'''


def _apply(files: Files, params: Params) -> list[Patch]:
    return [replace_once(files, ENGINE, _FIRST, '''\
                if emitted == 0:  # time to first audio: queued behind the prefill, waited for at once
                    first = self._queue(frames, emitted, len(frames), schedule.overlap_frames)
                    yield self._beside.finish(first, self.config.codec.frame_samples)
''')]


codec_first_window_queued = Transform(
    name="codec_first_window_queued",
    # an estimate, not a measurement: on the H100 the first chunk's codec part took 1.09-1.39 ms against ~0.9 ms
    # of its window's graph (session 38's first-chunk cuts), most of the difference the host's launches after the
    # range check's wait; 0.1-0.3 ms of a 14-24 ms TTFA
    first_audio={"cuda": 1.01},
    summary="queue the stream's first codec window behind the prefill on codec_overlap's side stream, reading its "
            "range flag with the audio, so the host does not wait for the prefill before launching the window",
    feature="codec",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("codec_overlap",),
    lesson="A host read of the device (a range check's bool) between two GPU stages makes the GPU idle while the "
           "host launches the second stage after the first ends; queue both and read once at the end. The first "
           "codec window is on the time to first audio, so only the launches after the wait are saved there "
           "(~0.1-0.3 ms), nothing of the window's own kernels.",
)
