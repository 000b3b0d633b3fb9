"""The small tensor ops around the graphed frame's draws as two Triton kernels, where the predict step launched
~30 one- or few-element torch kernels before the tower and ~10 after it:
- after the main draw, one program per shared tower layer (those fed the main token's code): the teacher-force
  select of the main index, the code and the semantic flag it gives, that layer's code embedding times the flag,
  and for layer 0 the input frame's summed codebook embeddings (tower.Tower.input_frame_embedding) added;
- after the last code, one program: the frame row (the main token, EOS with zero codes, or the forced frame), its
  write to the history at pos and to the frame buffer, the RAS window's shift and pos + 1.
Values are rounded to the activation dtype where the torch ops round them.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_runtime.config import Drama3Config

from .frame_glue_params import BLOCK_K, NUM_WARPS

MAX_SHARED = 8  # tables the entry kernel takes as arguments (shared tower layers + 1)


@triton.jit
def _entry_kernel(drawn_ptr, use_ptr, force_ptr, frame_ptr, t0, t1, t2, t3, t4, t5, t6, t7, books_ptr, e_ptr,
                  index_ptr, scale_ptr, begin, codebook, BOOKS: tl.constexpr, BOOKS_BLOCK: tl.constexpr,
                  H: tl.constexpr, BK: tl.constexpr):
    j = tl.program_id(0)
    main = tl.load(force_ptr)
    forced = tl.where((main >= begin) & (main < begin + codebook), main - begin + 1, 0)
    index = tl.where(tl.load(use_ptr) != 0, forced, tl.load(drawn_ptr))
    code = tl.maximum(index - 1, 0)
    scale = (index > 0).to(tl.float32)
    dt = e_ptr.dtype.element_ty
    tl.store(index_ptr, index, mask=j == 0)
    tl.store(scale_ptr, scale.to(dt), mask=j == 0)
    table = tl.where(j == 1, t1, tl.where(j == 2, t2, tl.where(j == 3, t3, t0)))
    table = tl.where(j == 4, t4, tl.where(j == 5, t5, tl.where(j == 6, t6, tl.where(j == 7, t7, table))))
    # the input frame's codebook rows (layer 0's extra), zero unless its main token is an audio token
    last = tl.load(frame_ptr)
    audio = ((last >= begin) & (last < begin + codebook)).to(tl.float32)
    books = tl.arange(0, BOOKS_BLOCK)
    real = books < BOOKS
    ids = tl.load(frame_ptr + 1 + books, mask=real, other=0) + books * codebook
    first = (j == 0).to(tl.float32)
    for c in tl.static_range(H // BK):
        cols = c * BK + tl.arange(0, BK)
        e = (tl.load(table + code * H + cols).to(tl.float32) * scale).to(dt).to(tl.float32)
        rows = tl.load(books_ptr + ids[:, None] * H + cols[None, :], mask=real[:, None], other=0.0)
        extra = (tl.sum(rows.to(tl.float32), axis=0).to(dt).to(tl.float32) * audio).to(dt).to(tl.float32)
        tl.store(e_ptr + j * H + cols, (e + extra * first).to(dt))


@triton.jit
def _finish_kernel(index_ptr, codes_ptr, use_ptr, force_ptr, frame_ptr, history_ptr, pos_ptr, recent_ptr, begin, eos,
                   WIDTH: tl.constexpr, WIDTH_BLOCK: tl.constexpr, WINDOW: tl.constexpr, WINDOW_BLOCK: tl.constexpr):
    index = tl.load(index_ptr)
    semantic = (index > 0).to(tl.int64)
    slots = tl.arange(0, WIDTH_BLOCK)
    inside = slots < WIDTH
    codes = tl.load(codes_ptr + slots - 2, mask=(slots >= 2) & inside, other=0)  # slots 2.. hold codes 1..
    row = tl.where(slots == 0, tl.where(index > 0, begin + index - 1, eos),
                   tl.where(slots == 1, tl.maximum(index - 1, 0), codes) * semantic)
    row = tl.where(tl.load(use_ptr) != 0, tl.load(force_ptr + slots, mask=inside, other=0), row)
    pos = tl.load(pos_ptr)
    tl.store(history_ptr + pos * WIDTH + slots, row, mask=inside)
    tl.store(frame_ptr + slots, row, mask=inside)
    if WINDOW > 0:
        w = tl.arange(0, WINDOW_BLOCK)
        shifted = tl.where(w == WINDOW - 1, index, tl.load(recent_ptr + w + 1, mask=w + 1 < WINDOW, other=0))
        tl.debug_barrier()  # every thread's read of the window before any thread overwrites it
        tl.store(recent_ptr + w, shifted, mask=w < WINDOW)
    tl.store(pos_ptr, pos + 1)


class FrameGlue:
    """The kernels' fixed-address outputs (captured graphs keep their addresses): the shared layers' code
    embeddings, the main index and the semantic flag in the activation dtype."""

    def __init__(self, config: Drama3Config, tables: list[torch.Tensor], books: torch.Tensor) -> None:
        hidden, self.config = config.hidden_size, config
        self.tables = tables[:config.tower.num_shared_layers + 1]
        self.bk = min(BLOCK_K, hidden)
        if len(self.tables) > MAX_SHARED or hidden % self.bk or not all(t.is_contiguous() for t in [*tables, books]):
            raise ValueError(f"triton_frame_glue takes up to {MAX_SHARED} shared tower layers, a hidden size that "
                             f"splits into blocks of {self.bk} and contiguous embedding tables")
        device, dtype = books.device, books.dtype
        self.books = books
        self.e = torch.zeros((len(self.tables), hidden), dtype=dtype, device=device)
        self.index = torch.zeros((), dtype=torch.long, device=device)
        self.scale = torch.zeros((), dtype=dtype, device=device)

    def entry(self, drawn: torch.Tensor, use: torch.Tensor, force: torch.Tensor, frame: torch.Tensor) -> None:
        """From the main draw (0-d int64) and the frame buffers: self.index, self.scale and self.e."""
        cfg, tables = self.config, self.tables
        padded = tables + [tables[0]] * (MAX_SHARED - len(tables))  # unread past the shared layers
        _entry_kernel[(len(tables),)](drawn, use, force, frame, *padded, self.books, self.e, self.index, self.scale,
                                      cfg.semantic_begin, cfg.codebook_size, cfg.num_codebooks,
                                      triton.next_power_of_2(cfg.num_codebooks), cfg.hidden_size, self.bk,
                                      num_warps=NUM_WARPS)

    def finish(self, codes: torch.Tensor, use: torch.Tensor, force: torch.Tensor, frame: torch.Tensor,
               history: torch.Tensor, pos: torch.Tensor, recent: torch.Tensor | None) -> None:
        """The predicted frame from self.index and `codes` (codes 1.. as int64) into history[pos] and frame, the
        main index into the RAS window (None: left alone), pos + 1."""
        cfg, window = self.config, 0 if recent is None else recent.numel()
        width = frame.numel()
        _finish_kernel[(1,)](self.index, codes, use, force, frame, history, pos, recent if window else pos,
                             cfg.semantic_begin, cfg.eos_token_id, width, triton.next_power_of_2(width), window,
                             triton.next_power_of_2(max(window, 1)), num_warps=1)  # (an empty window: unread)
