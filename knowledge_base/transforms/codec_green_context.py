"""codec_green_context: codec_overlap's side stream made a green context's, so the streamed codec windows decoded
beside the frame graphs run on `side_sms` SMs and the frames keep the rest. The helper lives in
templates/codec_green_context/.
"""
from __future__ import annotations

from .base import Files, Knobs, Params, Patch, Transform, replace_once, template_files

BESIDE = "codec_beside.py"
_IMPORT = "from .codec import Codec\n"
_STREAM = '        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None\n'

KNOBS = Knobs("codec_green_params.py", "codec_green_context", {
    "side_sms": "SMs the codec windows decoded beside the frames may take (the first and last windows take all)",
}, frame_wide=True)  # it shares the GPU between the codec and the frames: a retune reaches the whole stream


def _apply(files: Files, params: Params) -> list[Patch]:
    sms = int(params["side_sms"])
    if sms < 8 or sms % 8:
        raise ValueError(f"codec_green_context: side_sms is an SM count, a multiple of 8 from 8 (the partition "
                         f"granularity of sm_90), got {sms}")
    return [
        *template_files(files, "codec_green_context"),
        KNOBS.patch({"side_sms": sms}),
        replace_once(files, BESIDE, _IMPORT, _IMPORT + "from .codec_green_params import SIDE_SMS\n"
                                                        "from .green_stream import GreenStream\n"),
        replace_once(files, BESIDE, _STREAM, """\
        # codec_green_context: a stream of a green context of SIDE_SMS SMs, kept alive with the engine
        self._green = GreenStream(self.device, SIDE_SMS) if self.device.type == "cuda" else None
        self._stream = self._green.stream if self._green is not None else None
"""),
    ]


codec_green_context = Transform(
    name="codec_green_context",
    # a guess until measured: session 23's 200-frame streams spent 32-36 ms beyond their first audio and decode
    # steps on the H200, about what the middle codec windows take alone (~25 ms), i.e. hardly hidden at all
    impact={"cuda": 1.03},
    summary="run the codec windows that codec_overlap decodes beside the frames on a green context's stream "
            "limited to side_sms SMs, so their convolutions cannot take every SM from the frame graphs",
    feature="codec",
    devices=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("codec_green_context",),
    apply=_apply,
    space={"side_sms": (32, 64, 16)},
    requires=("codec_overlap",),
    lesson="A block keeps its SM until it retires and a stream's priority only orders blocks that wait. Session "
           "23's streams spent about as long beyond their decode steps as the middle codec windows take alone, "
           "so codec_overlap's side stream seems to hide little: a codec convolution launches blocks for every "
           "SM and each frame kernel queued behind them waits. A green context (CUDA driver 12.4+) bounds the SMs a stream's "
           "kernels may use; the codec then runs slower but beside the frames. Too few SMs and the window queued "
           "just before the stream's end finishes after the last frame; the first window (time to first audio) "
           "and the last run on the whole GPU as before.",
)
