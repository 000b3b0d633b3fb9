"""pipelined_frames: frame k+1's backbone, lm_head and main draw run beside frame k's tower and code draws, on a
second stream of the same CUDA graph. The backbone reads only the previous frame's main token, so after that
token is drawn the two halves of consecutive frames are independent. The engine file it adds lives in
templates/pipelined_frames/.
"""
from __future__ import annotations

from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

STEP, STATE, ENGINE = "decode_step.py", "static_state.py", "graph_engine.py"
_GLUE = "                                  frame_embedding.__self__.codebook_embeddings)\n"
_RUN = '''        """kind "frame": backbone then predict (a decode step); "predict": the first frame after prefill."""
'''
_RECENT = "        self._recent: dict[int, torch.Tensor] = {}\n"
_MUTABLE = "[b.pos, b.frame, b.hidden, b.main_logits, b.code_logits]"
_FORCING = "        self._forcing = False\n"
_PREWARM = '                for kind in ("predict", "frame"):\n'
_SPAN = '''        position = self._rows if kind == "frame" else self._rows - 1
        span = self._span(position + 1)
'''

KNOBS = Knobs("frame_pipeline_params.py", "pipelined_frames", {
    "side_priority": "CUDA stream priority of the next frame's head (-1: ahead of the tail's kernels, 0: even)",
}, frame_wide=True)  # the head branch is the frame's critical path (session 22: backbone 1.88 of 2.40 ms)


def _apply(files: Files, params: Params) -> list[Patch]:
    if "frame_glue.py" not in files:  # the select and the tail are the glue's and the code heads' kernels
        raise NotApplicable("pipelined_frames: apply triton_frame_glue first")
    priority = int(params["side_priority"])
    if priority not in (-1, 0):
        raise ValueError(f"pipelined_frames: side_priority is a torch stream priority, -1 or 0, got {priority}")
    return [
        *template_files(files, "pipelined_frames"),
        KNOBS.patch({"side_priority": priority}),
        replace_once(files, STEP, _GLUE, _GLUE + """\
        self.pipeline = None  # pipelined_frames: consecutive frames overlapped, where the glue's kernels run
        if self.glue is not None:
            from .frame_pipeline import FramePipeline

            self.pipeline = FramePipeline(self, state)
"""),
        replace_once(files, STEP, _RUN, _RUN + """\
        if self.pipeline is not None:
            self.pipeline.run(kind, span, sampling)
            return
"""),
        replace_once(files, STATE, _RECENT, _RECENT + """\
        # pipelined_frames: buffers a step leaves for the next one, which a capture's warm-up must not change
        self.pipeline_buffers: list[torch.Tensor] = []
"""),
        replace_once(files, STATE, _MUTABLE, _MUTABLE + " + self.pipeline_buffers"),
        replace_once(files, ENGINE, _PREWARM, _PREWARM.replace('"frame")', '"frame_first", "frame")')),
        replace_once(files, ENGINE, _FORCING, _FORCING + """\
        self._head_pending = False  # pipelined_frames: the first frame's step left the next frame's head out
"""),
        replace_once(files, ENGINE, _SPAN, '''\
        position = self._rows if kind == "frame" else self._rows - 1
        if kind == "predict":  # pipelined_frames: frame 0 alone, then a step that starts with frame 1's head
            self._head_pending = True
        elif self._head_pending:
            kind, self._head_pending = "frame_first", False
        if position + 1 >= self.config.max_context_rows:  # no next frame to start
            kind += "_last"
        span = self._span(position + 2)  # the next frame's row too: its head runs in this step
'''),
    ]


pipelined_frames = Transform(
    name="pipelined_frames",
    # measured on an H100 (session 21, docs/benchmarks.md): 2.447 -> 1.879 ms per decoded drama3-mid frame
    # (tests/gpu/test_gpu_pipelined_frames.py); at full size, with the code heads and the glue, 3.718 -> 2.938 ms
    # per frame and 236.7-243.9 -> 294.5-301.2 frames/s on 200-frame streams (scripts/gpu_fast_check.py), of which
    # the code heads and the glue are ~0.21 ms
    impact={"cuda": 1.18},
    summary="run frame k+1's backbone, lm_head and main draw beside frame k's tower and code draws, as two "
            "branches of one CUDA graph: the backbone needs only frame k's main token, so each branch fills the "
            "other's launch gaps and latency-bound kernels",
    feature="codebook_mtp",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("pipelined_frames",),
    apply=_apply,
    space={"side_priority": (0, -1)},
    requires=("cuda_graph_frame", "triton_frame_glue"),
    lesson="Drama 3's backbone sees only the main token of the frame before (mtp_shared_pre: codes enter through "
           "the tower's first layer), so frame k+1's backbone can start as soon as frame k's main token is drawn. "
           "Each graphed step selects frame k's token, then forks: frame k's tower on one stream, frame k+1's "
           "backbone on another. The branches must write disjoint buffers (the head's hidden and logits are copied "
           "for the tail before the fork), buffers that a step leaves for the next one must be restored after a "
           "capture's warm-up run, and the context's last row runs the tail alone.",
)
