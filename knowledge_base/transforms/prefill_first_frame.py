"""prefill_first_frame: the first frame drawn inside the prefill graph's tower pass. The graphed prefill ran the tower
teacher-forced over the prompt's rows 0..R-2 (filling its KV caches), then a separate predict step ran the 13 tower
layers again for row R-1 alone: the tower's ~2 GB of weights read twice and ~80 one-row kernels before the first
audio. Here the prefill runs lm_head and the main draw on row R-1's hidden (the pipeline's head and select), then
the tower pass over all the bucket's rows, layer by layer: row R-1's embeddings are the drawn frame's (the glue's,
then the code heads' as each code is drawn from that row's layer output), the other rows' their labels'. The
prefill graphs are then captured per (row bucket, sampling parameters), the draws' constants. Without the frame
glue (the engine on CPU) the prefill and its predict step stay as they were.
"""
from __future__ import annotations

from .base import Files, NotApplicable, Params, Patch, Transform, replace_once, require_files

ENGINE, GRAPHS, PROGRAM = "graph_engine.py", "prefill_graphs.py", "prefill_program.py"
_NEEDS = {"frame_pipeline.py": "pipelined_frames", "prefill_program.py": "cuda_graph_prefill"}

_ENGINE_DOC = ("prefill replays a prefill graph (prefill_graphs.py) into StaticState's caches, then the predict step "
               "(the\nfirst frame: lm_head, draw, tower)")
_ENGINE_GRAPHS = "        self.prefill_graphs = PrefillGraphs(config, model, self.state, self._pool)\n"
_ENGINE_PREFILL = """\
        self.state.reset(seed, sampling.ras_window, rows[-1], R - 1)
        self.prefill_graphs.run(rows)
        self._rows, self._sampling = R, sampling
        return self._step("predict", force)
"""
_ENGINE_KINDS = '                for kind in ("predict", "frame_first", "frame"):\n'

_GRAPHS_INIT = """\
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState, pool: tuple | None) -> None:
        self.program = PrefillProgram(config, model, state)
        self.state, self.pool = state, pool
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
"""
_GRAPHS_PREWARM = "                    self._graph(bucket)\n"
_GRAPHS_RUN = '''\
    def run(self, rows: torch.Tensor) -> None:
        """Prefill prompt rows (R, 11), on the device, into the state (after state.reset)."""
        self.program.load(rows)
        bucket = self.bucket(rows.shape[0])
        if self.pool is None:
            self.program.run(bucket)
        else:
            self._graph(bucket).replay()

    def _graph(self, bucket: int) -> torch.cuda.CUDAGraph:
        if bucket not in self._graphs:
            self._graphs[bucket], _ = capture(lambda: self.program.run(bucket), self.pool, keep=self.state.mutable())
        return self._graphs[bucket]
'''
_GRAPHS_IMPORT = "from reference_runtime.config import Drama3Config\n"

_PROGRAM_API = "from reference_runtime.api import ROW_WIDTH\n"
_PROGRAM_TOWER_IMPORT = "from .tower import Tower, is_semantic_token\n"
_PROGRAM_STEPS = "tower = _step(Tower.__call__)\n"
_PROGRAM_INIT = """\
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState) -> None:
        self.config, self.model, self.state = config, model, state
"""
_PROGRAM_RUN = '''\
    def run(self, bucket: int) -> None:
        """Prefill the loaded prompt padded to `bucket` rows (>= R) into the state, which state.reset cleared."""
'''
_PROGRAM_TOWER = "        labels = rows[1:]\n"
_PROGRAM_END = "        self.state.buf.hidden.copy_(hidden.index_select(0, self.length - 1))\n"


def _engine_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, ENGINE, _ENGINE_DOC, "prefill replays a prefill graph (prefill_graphs.py) into "
                     "StaticState's caches, with the first frame drawn\ninside its tower pass (prefill_first_frame; "
                     "without the frame glue, the predict step after it)"),
        replace_once(files, ENGINE, _ENGINE_GRAPHS, _ENGINE_GRAPHS.replace("self._pool)", "self._pool, self.program)")),
        replace_once(files, ENGINE, _ENGINE_PREFILL, """\
        self.state.reset(seed, sampling.ras_window, rows[-1], R - 1)
        self._rows, self._sampling = R, sampling
        if self.program.pipeline is None:  # no frame glue (CPU): the first frame in its own step
            self.prefill_graphs.run(rows, None)
            return self._step("predict", force)
        self._set_force(force)  # read by the draws inside the prefill graph
        self.prefill_graphs.run(rows, sampling)  # prefill_first_frame: frame 0 is drawn inside it
        self._head_pending = True  # as after the predict step: the next step first runs frame 1's head
        buf = self.state.buf
        return FrameStep(frame=buf.frame, main_logits=buf.main_logits, code_logits=buf.code_logits)
"""),
        # on CUDA the frame glue, and so the pipeline, is always there: the prefill draws the first frame
        replace_once(files, ENGINE, _ENGINE_KINDS, '                for kind in ("frame_first", "frame"):  # '
                                                   'prefill_first_frame: no predict step\n'),
    ]


def _graphs_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, GRAPHS, _GRAPHS_IMPORT,
                     "from reference_runtime.api import SamplingParams\n" + _GRAPHS_IMPORT),
        replace_once(files, GRAPHS, _GRAPHS_INIT, """\
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState, pool: tuple | None,
                 frames=None) -> None:
        \"\"\"frames: the engine's decode_step.FrameProgram, whose glue and code heads draw the first frame inside the
        prefill where it has them (prefill_first_frame).\"\"\"
        self.program = PrefillProgram(config, model, state, frames)
        self.state, self.pool = state, pool
        # per (bucket, sampling parameters): the first frame's draws are captured with their constants
        self._graphs: dict[tuple[int, SamplingParams | None], torch.cuda.CUDAGraph] = {}
        self._prewarm_sampling = SamplingParams() if frames is not None and frames.pipeline is not None else None
"""),
        replace_once(files, GRAPHS, _GRAPHS_PREWARM,
                     "                    self._graph(bucket, self._prewarm_sampling)\n"),
        replace_once(files, GRAPHS, _GRAPHS_RUN, '''\
    def run(self, rows: torch.Tensor, sampling: SamplingParams | None) -> None:
        """Prefill prompt rows (R, 11), on the device, into the state (after state.reset); with `sampling`, also
        draw the first frame (prefill_first_frame)."""
        self.program.load(rows)
        bucket = self.bucket(rows.shape[0])
        if self.pool is None:
            self.program.run(bucket, sampling)
        else:
            self._graph(bucket, sampling).replay()

    def _graph(self, bucket: int, sampling: SamplingParams | None) -> torch.cuda.CUDAGraph:
        key = (bucket, sampling)
        if key not in self._graphs:
            if sampling is not None:  # allocated before the warm-up, so it is restored after it
                self.state.recent(sampling.ras_window)
            self._graphs[key], _ = capture(lambda: self.program.run(bucket, sampling), self.pool,
                                           keep=self.state.mutable())
        return self._graphs[key]
'''),
    ]


def _program_patches(files: Files) -> list[Patch]:
    return [
        replace_once(files, PROGRAM, _PROGRAM_API, "from reference_runtime.api import ROW_WIDTH, SamplingParams\n"),
        replace_once(files, PROGRAM, _PROGRAM_TOWER_IMPORT, "from .decode_sampling import FIRST_CODE\n"
                     "from .tower import Tower, TowerLayer, is_semantic_token\n"),
        replace_once(files, PROGRAM, _PROGRAM_STEPS, _PROGRAM_STEPS + '''

def _tower_layer(layer: TowerLayer, x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor,
                 extra: torch.Tensor | None, live: torch.Tensor, last: torch.Tensor, positions: torch.Tensor,
                 cache) -> torch.Tensor:
    """One tower layer over a bucket's rows as Tower.__call__ runs it teacher-forced (each row embeds its label's
    code `codes` times `scale`, plus `extra` in layer 0), except the row where `last` is set, which embeds `live`
    (1, hidden): the first frame's drawn code (prefill_first_frame)."""
    e = F.embedding(codes, layer.code_embedding) * scale[:, None]
    if extra is not None:
        e = e + extra
    return layer(x, torch.where(last[:, None], live, e), positions, cache)


tower_layer = _step(_tower_layer)
'''),
        replace_once(files, PROGRAM, _PROGRAM_INIT, """\
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState, frames=None) -> None:
        self.config, self.model, self.state = config, model, state
        self.frames = frames  # decode_step.FrameProgram: its pipeline, glue and code heads draw the first frame
"""),
        replace_once(files, PROGRAM, _PROGRAM_RUN, '''\
    def run(self, bucket: int, sampling: SamplingParams | None = None) -> None:
        """Prefill the loaded prompt padded to `bucket` rows (>= R) into the state, which state.reset cleared; with
        `sampling`, the first frame too, drawn inside the tower pass (prefill_first_frame)."""
'''),
        replace_once(files, PROGRAM, _PROGRAM_TOWER, """\
        if sampling is not None:
            self._tower_with_first_frame(hidden, rows, positions, sampling)
            return
""" + _PROGRAM_TOWER),
        replace_once(files, PROGRAM, _PROGRAM_END, _PROGRAM_END + '''
    def _tower_with_first_frame(self, hidden: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
                                sampling: SamplingParams) -> None:
        """The first frame's predict step (the pipeline's head draw, select and tail) with its tower pass merged
        into the prefill's: every layer runs once over the bucket's rows, the rows before R-1 teacher-forced, row
        R-1 on the frame being drawn, its codes drawn from that row of each residual layer's output."""
        frames, buf, tower = self.frames, self.state.buf, self.model.tower
        pipeline, glue, chain = frames.pipeline, frames.glue, frames.code_heads
        last_row = self.length - 1
        buf.hidden.copy_(hidden.index_select(0, last_row))
        pipeline._head_draw(sampling)  # lm_head and the main draw
        pipeline._select(sampling)  # the main token, the shared layers' embeddings, pos and the RAS window
        labels = torch.cat((rows[1:], rows[-1:]))  # row p's label is row p + 1; the last row's is drawn instead
        scale = is_semantic_token(self.config, labels[:, 0]).to(hidden.dtype)
        extra, last = tower.input_frame_embedding(rows), positions == last_row
        _dynamic_rows(labels, scale, extra, last)
        noise = frames.noise.draw(buf.seed, pipeline.tail_pos)
        num_shared, x = self.config.tower.num_shared_layers, hidden
        for j, (layer, cache) in enumerate(zip(tower.layers, self.state.tower)):
            codes = labels[:, 1 + max(0, j - num_shared)]
            _dynamic_rows(x, codes)
            live = glue.e[j:j + 1] if j <= num_shared else chain.e
            x = tower_layer(layer, x, codes, scale, extra if j == 0 else None, live, last, positions, cache)
            if j >= num_shared:
                k = j - num_shared + 1
                following = frames.w.tower[j + 1].code_embedding if j + 1 < len(frames.w.tower) else None
                chain.draw(k, x.index_select(0, last_row), sampling, noise[FIRST_CODE + k - 1], buf.use_force,
                           buf.force[1 + k], glue.scale, following)
        glue.finish(chain.codes, buf.use_force, buf.force, buf.frame, buf.history, pipeline.tail_pos, None)
'''),
    ]


def _apply(files: Files, params: Params) -> list[Patch]:
    require_files(files, "prefill_first_frame", _NEEDS)
    if "_tower_with_first_frame" in files[PROGRAM]:
        raise NotApplicable("prefill_first_frame is applied already")
    return [*_engine_patches(files), *_graphs_patches(files), *_program_patches(files)]


prefill_first_frame = Transform(
    name="prefill_first_frame",
    # measured with triton_deltanet_prep on an H100 (session 28, docs/benchmarks.md; scripts/gpu_fast_check.py,
    # 200-frame streams side by side on the leap's stack): time to first audio 15.6 / 23.3 / 22.2 -> 14.3 / 21.8 /
    # 20.5 ms (hello / sentences / voice), 1.07-1.09x for the pair, frames/s unchanged; its share assumed half
    first_audio={"cuda": 1.04},
    proven=frozenset({"cuda"}),
    summary="draw the first frame inside the graphed prefill: the tower runs once over all the prompt's rows with "
            "the last row's codes drawn between its layers, instead of a teacher-forced pass over rows 0..R-2 and "
            "then a one-row predict step reading the tower's weights again",
    feature="prefill",
    devices=frozenset({"cuda"}),
    apply=_apply,
    requires=("cuda_graph_prefill", "pipelined_frames"),
    lesson="Time to first audio is the prefill plus the first frame's predict step plus a 1-frame codec window. The "
           "predict step reads the whole tower (~2 GB bf16) for one row in ~80 latency-bound kernels, right after "
           "the prefill's teacher-forced tower pass read the same weights for the other rows. Running the tower "
           "once over all rows, the last row's embeddings and draws in between the layers, saves that second read "
           "and most of those launches; the draws keep their kernels. The prefill graph then depends on the "
           "sampling parameters (one capture per bucket and parameter set; the default set is captured at build).",
)
