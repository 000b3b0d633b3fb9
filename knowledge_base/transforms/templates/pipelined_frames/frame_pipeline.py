"""FramePipeline: consecutive decode frames overlapped where the model allows it. The backbone reads only the main
token of the frame before it (the "mtp_shared_pre" placement: a frame's codes enter through the tower), so once
frame k's main token is drawn, frame k+1's backbone, lm_head and main draw (its head) need nothing of frame k's
tower and code draws (its tail). Each step selects frame k's main token (drawn by the previous step's head, or
forced), then runs frame k's tail on the current stream and frame k+1's head on a second one: in a CUDA graph, two
branches whose launch gaps and latency-bound kernels (attention, the recurrent step, routing, draws) the other
branch's weight streaming can fill. Each branch computes what the one-frame step computed, in the same order.

The branches write no buffer the other reads, but one: the head writes the backbone's hidden (buf.hidden), its
main logits and its draw, and the select copies what the tail needs (hidden_tail, buf.main_logits) before they fork.
The select also writes frame k's main token into buf.frame[0], the backbone's input, and the tail's last kernel
writes the whole frame there: the same token, so the head reads it whichever comes first. buf.pos is the head's
row; the tail's row is tail_pos. The RAS window takes frame k's main index in the select, before frame
k+1's draw reads it, as the one-frame step had it by then. The first frame's step (after the prefill) runs no next
head, so the time to first audio is the one-frame step's; the step after it runs that head first. A step at the
context's last row has no next frame to start: its kind ends in "_last" and it runs no next head.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.api import SamplingParams

from .decode_sampling import FIRST_CODE
from .frame_pipeline_params import SIDE_PRIORITY


class FramePipeline:
    def __init__(self, program, state) -> None:
        """program: the decode_step.FrameProgram whose pieces (backbone, weights, code heads, glue) it runs."""
        buf, device = state.buf, state.device
        self.program, self.state = program, state
        self.main_next = torch.zeros_like(buf.main_logits)  # the head's main logits and draw, for the next select
        self.drawn_next = torch.zeros(1, dtype=torch.long, device=device)
        self.hidden_tail = torch.zeros_like(buf.hidden)
        self.tail_pos = torch.zeros_like(buf.pos)
        self.side = torch.cuda.Stream(device, priority=SIDE_PRIORITY) if device.type == "cuda" else None
        state.pipeline_buffers += [self.main_next, self.drawn_next]  # read by the next step: restored after warm-ups

    def run(self, kind: str, span: int, sampling: SamplingParams) -> None:
        """kind "predict": frame 0 after the prefill, its main draw, select and tail only (time to first audio
        waits for nothing else); "frame_first": the next step, which first runs the head that "predict" left out;
        "frame": the steps after it. "_last" appended at the context's last row: no next head."""
        if kind.startswith("predict"):
            self._head_draw(sampling)
        elif kind.startswith("frame_first"):
            self._head(span, sampling)
        self._select(sampling)
        if kind.startswith("predict") or kind.endswith("_last"):
            self._tail(span, sampling)
        elif self.side is None:  # on CPU: one after the other
            self._head(span, sampling)
            self._tail(span, sampling)
        else:
            current = torch.cuda.current_stream()
            self.side.wait_stream(current)
            with torch.cuda.stream(self.side):
                self._head(span, sampling)
            self._tail(span, sampling)
            current.wait_stream(self.side)

    def _select(self, sampling: SamplingParams) -> None:
        cfg, buf, glue = self.program.config, self.state.buf, self.program.glue
        glue.entry(self.drawn_next, buf.use_force, buf.force, buf.frame)  # index, flag, shared layers' embeddings
        index = glue.index  # the entry read frame k-1 from buf.frame: now frame k's main token, the head's input
        drawn_main = torch.where(index > 0, cfg.semantic_begin + index - 1, cfg.eos_token_id)
        buf.frame[:1].copy_(torch.where(buf.use_force, buf.force[:1], drawn_main))
        recent = self.state.recent(sampling.ras_window)
        recent.copy_(torch.cat((recent, index[None]))[1:])
        self.tail_pos.copy_(buf.pos)
        buf.pos.add_(1)
        self.hidden_tail.copy_(buf.hidden)
        buf.main_logits.copy_(self.main_next)

    def _head_draw(self, sampling: SamplingParams) -> None:
        """lm_head and the main draw from buf.hidden at row buf.pos."""
        from .decode_step import sample_main  # the module that imports this one

        prog, buf = self.program, self.state.buf
        self.main_next.copy_(F.linear(buf.hidden, prog.w.lm_head)[0])
        noise = prog.noise.draw(buf.seed, buf.pos)
        self.drawn_next.copy_(sample_main(self.main_next, sampling, self.state.recent(sampling.ras_window), noise))

    def _head(self, span: int, sampling: SamplingParams) -> None:
        self.program.backbone(span)
        self._head_draw(sampling)

    def _tail(self, span: int, sampling: SamplingParams) -> None:
        """Frame k's tower and codes at row tail_pos, from hidden_tail and the select's embeddings: the predict
        step's tower loop with triton_code_heads and triton_frame_glue."""
        from .decode_step import tower_layer

        prog, buf = self.program, self.state.buf
        glue, chain, pos = prog.glue, prog.code_heads, self.tail_pos
        future = buf.rows[:span] > pos
        noise = prog.noise.draw(buf.seed, pos)
        num_shared, x = prog.config.tower.num_shared_layers, self.hidden_tail
        for j, (lw, cache) in enumerate(zip(prog.w.tower, self.state.tower)):
            e = glue.e[j:j + 1] if j <= num_shared else chain.e
            x = tower_layer(x, e, lw, prog.tower_geo, cache, pos, future, prog.tower_rope)
            if j >= num_shared:
                k = j - num_shared + 1
                following = prog.w.tower[j + 1].code_embedding if j + 1 < len(prog.w.tower) else None
                chain.draw(k, x, sampling, noise[FIRST_CODE + k - 1], buf.use_force, buf.force[1 + k], glue.scale,
                           following)
        glue.finish(chain.codes, buf.use_force, buf.force, buf.frame, buf.history, pos, None)  # window: _select
