"""PrefillGraphs: GraphEngine.prefill's model work (PrefillProgram) replayed from one CUDA graph per row bucket,
MIN_PREFILL_ROWS doubled up to the prompt capacity. Graphs go into the engine's graph pool, whose temporaries
other graphs reuse, so everything a replay leaves for later (caches, states, buf.hidden) is in StaticState and
the inputs in PrefillProgram's buffers, all allocated outside the pool. Buckets up to PREWARM_PREFILL_ROWS are
captured at build, larger ones on first use. Without a pool (CPU) the program runs eagerly over the same padded
rows, which is how it is tested there.
"""
from __future__ import annotations

import torch

from reference_runtime.config import Drama3Config

from .drama3 import Drama3Model
from .graph_capture import capture
from .prefill_graph_params import MIN_PREFILL_ROWS, PREWARM_PREFILL_ROWS
from .prefill_program import PrefillProgram
from .static_state import StaticState


class PrefillGraphs:
    def __init__(self, config: Drama3Config, model: Drama3Model, state: StaticState, pool: tuple | None) -> None:
        self.program = PrefillProgram(config, model, state)
        self.state, self.pool = state, pool
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if pool is not None:
            with torch.inference_mode():
                bucket = 0
                while bucket < min(PREWARM_PREFILL_ROWS, self.program.capacity):
                    bucket = self.bucket(bucket + 1)
                    self._graph(bucket)

    def bucket(self, rows: int) -> int:
        """The row bucket covering `rows`: MIN_PREFILL_ROWS doubled until it fits, capped at the capacity."""
        bucket = MIN_PREFILL_ROWS
        while bucket < rows:
            bucket *= 2
        return min(bucket, self.program.capacity)

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
