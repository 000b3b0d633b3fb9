"""triton_frame_glue: the graphed frame's predict step keeps its GEMVs, draws and tower kernels, and the small ops
between them become two Triton kernels: one after the main draw (the forced-token select, the code and flag it
gives, the shared tower layers' code embeddings and the input frame's codebook sum) and one at the end (the frame
row, its history write, the RAS window and pos). The main logits are written where the frame keeps them. The
kernel file lives in templates/triton_frame_glue/.
"""
from __future__ import annotations

from .backbone_kernels import STEP
from .base import Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, template_files

_CHAIN = ("            self.code_heads = CodeHeads(weights.heads, config.codec.residual_codebook_size, "
          "state.buf.code_logits)\n")
_LOGITS = "        main_logits = F.linear(buf.hidden, self.w.lm_head).float()[0]\n"
_INDEX = """\
        forced = torch.where(is_semantic_token(cfg, force[0]), force[0] - cfg.semantic_begin + 1, 0)
        index = torch.where(use, forced, sample_main(main_logits, sampling, recent, noise))
        semantic = index > 0
        codes = [(index - 1).clamp_min(0)]
        label_scale = semantic.to(buf.hidden.dtype)
"""
_EMBED = """\
            if chain is not None and j > num_shared:  # the previous layer's code_heads kernel wrote it
"""
_FRAME = "            if j == 0:\n                e = e + self.frame_embedding(buf.frame[None])\n"
_TAIL = "        main = torch.where(semantic, cfg.semantic_begin + codes[0], cfg.eos_token_id)\n"

KNOBS = Knobs("frame_glue_params.py", "triton_frame_glue", {
    "block_k": "hidden columns per unrolled chunk of the entry kernel",
    "num_warps": "of the entry kernel",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    if "code_heads.py" not in files:  # the finish kernel reads the codes from code_heads' buffer
        raise NotApplicable("triton_frame_glue: apply triton_code_heads first")
    sizes = KNOBS.powers_of_two(params)
    return [
        *template_files(files, "triton_frame_glue"),
        KNOBS.patch(sizes),
        replace_once(files, STEP, _CHAIN, _CHAIN + """\
        self.glue = None  # triton_frame_glue's buffers, where its kernels run (with code_heads')
        if self.code_heads is not None:
            from .frame_glue import FrameGlue

            # frame_embedding is tower.Tower.input_frame_embedding: the kernel sums that tower's codebook rows
            self.glue = FrameGlue(config, [lw.code_embedding for lw in weights.tower],
                                  frame_embedding.__self__.codebook_embeddings)
"""),
        replace_once(files, STEP, _LOGITS, """\
        glue = self.glue
        if glue is not None:  # the draw reads the logits where the frame keeps them: no copy at the end
            main_logits = buf.main_logits
            main_logits.copy_(F.linear(buf.hidden, self.w.lm_head)[0])
        else:
            main_logits = F.linear(buf.hidden, self.w.lm_head).float()[0]
"""),
        replace_once(files, STEP, _INDEX, """\
        if glue is not None:  # the select, the code, the flag and the shared layers' embeddings in one kernel
            glue.entry(sample_main(main_logits, sampling, recent, noise), buf.use_force, force, buf.frame)
            codes, label_scale = [], glue.scale
        else:
""" + "".join("    " + line + "\n" for line in _INDEX.splitlines())),
        replace_once(files, STEP, _EMBED, """\
            if glue is not None and j <= num_shared:  # the entry kernel wrote it (layer 0's with the frame's sum)
                e = glue.e[j:j + 1]
            elif chain is not None and j > num_shared:  # the previous layer's code_heads kernel wrote it
"""),
        replace_once(files, STEP, _FRAME, "            if j == 0 and glue is None:\n"
                                          "                e = e + self.frame_embedding(buf.frame[None])\n"),
        replace_once(files, STEP, _TAIL, """\
        if glue is not None:  # the frame row, its history write, the RAS window and pos in one kernel
            glue.finish(chain.codes, buf.use_force, force, buf.frame, buf.history, buf.pos, recent)
            return
""" + _TAIL),
    ]


triton_frame_glue = Transform(
    name="triton_frame_glue",
    # measured on an H100 (session 21, tests/gpu/test_gpu_triton_frame_glue.py): a graphed drama3-mid predict step
    # took 1.262 ms against 1.345 with the code heads alone, 0.08 ms of the kept engine's 3.67 ms frame there
    impact={"cuda": 1.02},
    summary="the graphed frame's small ops around the draws as two Triton kernels: after the main draw the "
            "forced-token select, the code and flag and the shared tower layers' code embeddings (with the input "
            "frame's codebook sum); at the end the frame row, history, RAS window and pos; ~40 launches become 2",
    feature="codebook_mtp",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_frame_glue",),
    apply=_apply,
    space={"block_k": (1024, 512, 2048), "num_warps": (4, 2, 8)},
    requires=("cuda_graph_frame", "triton_sampling", "triton_code_heads"),
    lesson="Around the draws, predict chained ~40 kernels of one to a few thousand elements: comparisons and "
           "selects for the forced token, a cast, five embedding lookups and scalings, the input frame's codebook "
           "sum (an arange, a gather, a sum, a mask), then a stack, a cat, selects, the history scatter, the RAS "
           "window's cat and copy, the logits copy and pos + 1. In a CUDA graph each still costs a launch's fixed "
           "~2 us; their work fits two kernels.",
)
