"""codec_context_trim: a stream's codec windows decoded beside the frames (codec_overlap) run the transformer over
the whole window but the upsampling and conv decoder only over the frames the chunk emits and the few before them
that can still change its samples (templates/codec_context_trim/: every convolution is causal, so frames further
back change nothing). The 32 frames of left context a later window re-decodes then cost the transformer, not the
convolutions that are most of the codec's time. decode_audio (what the judge compares the chunks with) stays whole.
"""
from __future__ import annotations

import re

from .base import Files, NotApplicable, Params, Patch, Transform, replace_once, template_files

CODEC, GRAPH, BESIDE = "codec.py", "codec_graph.py", "codec_beside.py"
_FORWARD = "    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # (B, 10, n) -> (B, n * frame_samples)\n"
_KEEP_FORWARD = ("    def forward(self, codes: torch.Tensor, keep: int = 0) -> torch.Tensor:  # -> (B, (n - keep) * "
                 "frame_samples)\n")
_POST = re.compile(r"^        x = self\.post_module\(self\.quantizer\(codes\)\).*\n", re.MULTILINE)
_GRAPH_CALL = """\
            return super().forward(codes)
        graph, padded, audio = self._graph(ladder_length(n), codes)
"""
_GRAPH_OUT = ("        return audio[:, :n * self.config.frame_samples].clone()  # the graph's output is overwritten "
              "by the next replay\n")
_GRAPH_KEY = """\
    def _graph(self, length: int, like: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        if length not in self._graphs:
"""
_GRAPH_STORE = """\
            self._graphs[length] = (graph, padded, audio)
        return self._graphs[length]
"""
_GRAPHS = "        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}\n"
_CAPTURE = "graph, audio = capture(lambda: self._compiled(padded),"  # then the pool (and a stream on new engines)
_COMPILED = "self._compiled = torch.compile(lambda codes: Codec.forward(self, codes))"
_DECODE = """\
    def _decode(self, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        \"\"\"(out-of-range flag, waveform) of (10, n) int64 codes, both left on the device: Codec.decode without
        its host reads.\"\"\"
"""
_DECODE_OUT = "        return bad, self.codec(safe[None])[0].float()\n"
_CHUNK = ("        return AudioChunk(audio=w.audio[w.skip * frame_samples:].cpu(), frame_start=w.start, "
          "frame_end=w.end,\n")
_SIZES = "        c = codec.config\n"
_SAME_AUDIO = ("the generation stream, and `finish` waits for that work alone. The audio is the same codec's on the "
               "same codes.\n")
_AUDIO_FIELD = "    audio: torch.Tensor  # (frames * frame_samples,) float32 on the codec's device\n"


def _codec_patches(files: Files) -> list[Patch]:
    found = _POST.findall(files.get(CODEC, ""))
    if len(found) != 1:
        raise NotApplicable(f"{CODEC}: the codec's transformer output line this transform trims is not there")
    return [
        replace_once(files, CODEC, _FORWARD, _KEEP_FORWARD + """\
        # codec_context_trim: `keep` leading frames go through the transformer only (their conv output is not wanted)
"""),
        replace_once(files, CODEC, found[0], found[0] + """\
        x = x[..., keep:]  # codec_context_trim: time is the last dim in either layout
"""),
    ]


def _graph_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, GRAPH, _FORWARD, _KEEP_FORWARD),
        replace_once(files, GRAPH, _GRAPH_CALL, """\
            return super().forward(codes, keep)
        graph, padded, audio = self._graph(ladder_length(n), keep, codes)
"""),
        replace_once(files, GRAPH, _GRAPH_OUT, """\
        # a clone: the graph's output is overwritten by the next replay
        return audio[:, :(n - keep) * self.config.frame_samples].clone()
"""),
        replace_once(files, GRAPH, _GRAPH_KEY, """\
    def _graph(self, length: int, keep: int,
               like: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        if (length, keep) not in self._graphs:
"""),
        replace_once(files, GRAPH, _GRAPH_STORE, """\
            self._graphs[length, keep] = (graph, padded, audio)
        return self._graphs[length, keep]
"""),
        replace_once(files, GRAPH, _GRAPHS, _GRAPHS.replace("dict[int,", "dict[tuple[int, int],")),
        replace_once(files, GRAPH, _CAPTURE,
                     "graph, audio = capture(lambda: self._compiled(padded, keep),"),
        replace_once(files, GRAPH, _COMPILED,
                     "self._compiled = torch.compile(lambda codes, keep: Codec.forward(self, codes, keep))"),
    ]


def _beside_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, BESIDE, "            bad, audio = self._decode(codes)\n",
                     "            bad, audio = self._decode(codes, skip)\n"),
        replace_once(files, BESIDE, "            bad, audio = self._decode(codes.to(self.device, non_blocking=True))\n",
                     "            bad, audio = self._decode(codes.to(self.device, non_blocking=True), skip)\n"),
        replace_once(files, BESIDE, _DECODE, """\
    def _decode(self, codes: torch.Tensor, skip: int) -> tuple[torch.Tensor, torch.Tensor]:
        \"\"\"(out-of-range flag, the waveform from frame `skip` on) of (10, n) int64 codes, both left on the device:
        Codec.decode without its host reads. The convolutions skip the left context's frames that no emitted sample
        depends on (codec_context_trim).\"\"\"
"""),
        replace_once(files, BESIDE, _DECODE_OUT, """\
        keep = max(0, skip - self._context)
        return bad, self.codec(safe[None], keep)[0].float()[(skip - keep) * self.codec.config.frame_samples:]
"""),
        replace_once(files, BESIDE, _CHUNK,
                     "        return AudioChunk(audio=w.audio.cpu(), frame_start=w.start, frame_end=w.end,\n"),
        replace_once(files, BESIDE, _SIZES, _SIZES + """\
        self._context = context_frames(c)  # codec_context_trim: left-context frames the convolutions still need
"""),
        replace_once(files, BESIDE, "from .codec import Codec\n",
                     "from .codec import Codec\nfrom .codec_context import context_frames\n"),
        replace_once(files, BESIDE, _SAME_AUDIO, "the generation stream, and `finish` waits for that work alone. "
                     "The audio is the same codec's on the same codes, its\nconvolutions started context_frames "
                     "before the chunk (codec_context_trim): equal up to the rounding of another length.\n"),
        replace_once(files, BESIDE, _AUDIO_FIELD,
                     "    audio: torch.Tensor  # ((frames - skip) * frame_samples,) float32 on the codec's device\n"),
    ]


def _apply(files: Files, params: Params) -> list[Patch]:
    return [*template_files(files, "codec_context_trim"), *_codec_patches(files), *_graph_patches(files),
            *_beside_patches(files)]


codec_context_trim = Transform(
    name="codec_context_trim",
    # measured on an H100 (session 36, docs/benchmarks.md), beside the pending leap alone, 200-frame streams with
    # 32-frame windows: a stream's time beyond its decode steps 14.2 / 16.2 / 17.8 -> 12.2 / 13.0 / 13.8 ms,
    # frames/s +0.3-0.7%, TTFA unchanged (the first window has no context to trim); the full-size bf16 windows
    # matched the whole windows within the stream gate (tests/gpu/test_gpu_codec_context_trim.py)
    impact={"cuda": 1.005},
    proven=frozenset({"cuda"}),
    summary="decode a stream window's left context through the codec's transformer only: the upsampling and conv "
            "decoder (most of the codec's time) start ~11 frames before the chunk, not 32, as every convolution is "
            "causal and frames further back cannot change the chunk's samples",
    feature="dac_codec",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("codec_overlap", "inductor_codec"),
    lesson="A streamed window re-decodes up to 32 frames of left context for the codec's windowed transformer, whose "
           "attention reaches back over the window; the convolutional stages after it are causal with a reach of "
           "~9 frames (kernel 7, dilations 1/3/9 at each rate, summed in frames), so their output for older frames "
           "is computed and thrown away. A 200-frame stream decodes 359 codec frames in 8 windows; with the "
           "convolutions trimmed it runs 266 of them through the convolutions. The codec windows overlap the decode "
           "steps but take their SMs: on an H100 a stream's time beyond its decode steps was about the windows' "
           "own time. The trimmed windows differ from the whole decode by the rounding of other cuDNN algorithms "
           "(another length), as the ladder's padded lengths already do.",
)
