"""codec_windows_ahead: at a chunk boundary, queue the new codec window before waiting for the previous one. With
codec_overlap the host waits for window k-1 first and queues window k only after handing k-1's audio over; when
k-1 ends after the block's frames (the frames' stream has priority, so the codec gets what they leave), the GPU
idles through that handover and until the next frames are queued. Queued first, window k runs meanwhile. The
chunks and their order are the same.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

ENGINE = "graph_engine.py"
_WAIT = '''\
            if queued is not None:  # decoded beside this block's frames
                yield self._beside.finish(queued, self.config.codec.frame_samples)
                queued = None
'''
_END_OF_BLOCK = '''\
                emitted = len(frames)
        if queued is not None:
'''


def _apply(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, ENGINE, _WAIT, '''\
            waiting, queued = queued, None  # codec_windows_ahead: waited for after this block's window is queued
'''),
        replace_once(files, ENGINE, _END_OF_BLOCK, '''\
                emitted = len(frames)
            if waiting is not None:  # decoded beside this block's frames; the GPU has the next window meanwhile
                yield self._beside.finish(waiting, self.config.codec.frame_samples)
        if queued is not None:
'''),
    ]


codec_windows_ahead = Transform(
    name="codec_windows_ahead",
    # an estimate, not a measurement: ~0.1-0.3 ms of host handover per chunk boundary where the GPU may idle, six
    # boundaries in a 200-frame stream under the targets' schedule, against ~600 ms of stream on an H100
    impact={"cuda": 1.002},
    summary="at each chunk boundary queue the new codec window on the side stream before waiting for the previous "
            "one, so the GPU has work while the host hands the previous chunk over and queues the next frames",
    feature="codec",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("codec_overlap",),
    lesson="Whatever the host waits for, queue the next independent GPU work before the wait: the handover after "
           "it (copies to the host, Python) otherwise leaves the GPU idle whenever the awaited work ends last. "
           "Here that is a codec window at each chunk boundary of a stream.",
)
