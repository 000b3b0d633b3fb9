"""triton_code_heads: after each of the graphed frame's 9 code-predicting tower layers, one Triton kernel does the
head GEMV over the codec's codebook rows only, the code's draw, the teacher-force select and the next layer's code
embedding, where cuda_graph_frame's predict step ran a cuBLAS GEMV of the whole head, a cast, the draw, a select,
an embedding lookup and a scaling (and stacked and copied the logits at the end). The kernel file lives in
templates/triton_code_heads/.
"""
from __future__ import annotations

from .backbone_kernels import STEP, SWITCH, triton_switch
from .base import (TEMPLATES, Files, Knobs, NotApplicable, Params, Patch, Transform, replace_once, require_files,
                   template_files)

_NOISE = "        self.noise = NoiseTable(FIRST_CODE + config.num_codebooks - 1, width, device)\n"
_LOOP = """\
        num_shared, x, logits = cfg.tower.num_shared_layers, buf.hidden, []
        for j, (lw, cache) in enumerate(zip(self.w.tower, self.state.tower)):
            e = F.embedding(codes[max(0, j - num_shared)][None], lw.code_embedding) * label_scale
"""
_HEAD = """\
                k = j - num_shared + 1
                logits.append(F.linear(x, self.w.heads[k - 1]).float()[0])
"""
_STACK = "        buf.code_logits.copy_(torch.stack(logits))\n"

KNOBS = Knobs("code_heads_params.py", "triton_code_heads", {
    "block_n": "head rows (codes) per program",
    "block_k": "hidden columns per unrolled chunk",
    "num_warps": "of the kernel; its last program draws the code with them",
})


def _apply(files: Files, params: Params) -> list[Patch]:
    # the kernel takes the arrival ticket from triton_tower and the race from triton_sampling
    require_files(files, "triton_code_heads",
                  {"triton_tower.py": "triton_tower", "triton_sampling.py": "triton_sampling"})
    if files["triton_sampling.py"] != (TEMPLATES / "triton_sampling" / "triton_sampling.py").read_text():
        raise NotApplicable("triton_code_heads: renew triton_sampling first (the kernel calls today's race)")
    sizes = KNOBS.powers_of_two(params)
    return [
        *template_files(files, "triton_code_heads"),
        KNOBS.patch(sizes),
        *triton_switch(files),
        replace_once(files, STEP, _NOISE, _NOISE + f"""\
        self.code_heads = None  # triton_code_heads' buffers, where its kernel runs
        if device.type == "cuda" or {SWITCH}:
            from .code_heads import CodeHeads

            self.code_heads = CodeHeads(weights.heads, config.codec.residual_codebook_size, state.buf.code_logits)
"""),
        replace_once(files, STEP, _LOOP, """\
        num_shared, x, logits, chain = cfg.tower.num_shared_layers, buf.hidden, [], self.code_heads
        for j, (lw, cache) in enumerate(zip(self.w.tower, self.state.tower)):
            if chain is not None and j > num_shared:  # the previous layer's code_heads kernel wrote it
                e = chain.e
            else:
                e = F.embedding(codes[max(0, j - num_shared)][None], lw.code_embedding) * label_scale
"""),
        replace_once(files, STEP, _HEAD, """\
                k = j - num_shared + 1
                if chain is not None:
                    following = self.w.tower[j + 1].code_embedding if j + 1 < len(self.w.tower) else None
                    codes.append(chain.draw(k, x, sampling, noise[FIRST_CODE + k - 1], buf.use_force, force[1 + k],
                                            label_scale, following))
                    continue
                logits.append(F.linear(x, self.w.heads[k - 1]).float()[0])
"""),
        replace_once(files, STEP, _STACK, """\
        if chain is None:  # the code_heads kernels wrote the rows in place
            buf.code_logits.copy_(torch.stack(logits))
"""),
    ]


triton_code_heads = Transform(
    name="triton_code_heads",
    # measured on an H100 (session 21, tests/gpu/test_gpu_triton_code_heads.py, docs/benchmarks.md): a frame's nine
    # code steps as a CUDA graph took 0.196 ms against 0.325 for the chain they replace, 0.13 ms of the kept
    # engine's 3.67 ms frame there
    impact={"cuda": 1.035},
    summary="after each code-predicting tower layer, one Triton kernel: the head GEMV over the codec's codebook "
            "rows only (a quarter of the head), the code's draw by the last program, the teacher-force select and "
            "the next layer's code embedding, instead of ~6 kernels and a draw per code",
    feature="codebook_mtp",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    knobs=KNOBS,
    templates=("triton_code_heads",),
    apply=_apply,
    space={"block_n": (8, 4, 16), "block_k": (1024, 512, 2048), "num_warps": (4, 8, 2)},
    requires=("cuda_graph_frame", "triton_tower", "triton_sampling"),
    lesson="The code heads are 4096 wide but the codec's residual codebooks hold 1024 codes, and the draw masks "
           "the rest: only the codebook's rows need reading (their logits past it now read -inf; the evaluator "
           "compares codes within the codebook). Per code the graphed frame chained a head GEMV, a cast, a "
           "one-program draw, a select, an embedding lookup and a scaling: six launches of a few us each in the "
           "tower's serial chain. The kernel's last program (arrival ticket) draws from the row in L2, so the draw "
           "needs no launch of its own; its warps are the GEMV's, and one-warp draws were slower (session 15).",
)
