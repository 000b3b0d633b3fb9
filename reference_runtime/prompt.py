"""The reference-bracket-v1 prompt (drama3_arch.md §2): a TTSRequest becomes rows (R, 11) int64 on CPU.

Each literal is tokenized on its own, so BPE merges never cross a seam; `<|speaker:N|>` tags in caller text
become their special ids, any other `<|...|>` token in caller text is rejected. References are numbered from 1.
"""
from __future__ import annotations

import re

import torch

from .api import ROW_WIDTH, TTSRequest, VoiceReference
from .config import Drama3Config
from .tokenizer import Drama3Tokenizer, load_tokenizer

INSTRUCTION = "convert the provided text to speech"
REFERENCE_INSTRUCTION = "convert the provided text to speech reference to the following:"
_SYSTEM_START = "<|im_start|>system\n"
_USER_START = "<|im_end|>\n<|im_start|>user\n"
_GENERATION_START = "<|im_end|>\n<|im_start|>assistant\n<|voice|>"
_STRUCTURAL = re.compile(r"(<\|im_start\|>|<\|im_end\|>|<\|voice\|>)")
_ANY_TOKEN = re.compile(r"<\|([^|<>]*)\|>")
_SPEAKER = re.compile(r"speaker:(0|[1-9][0-9]*)")

Piece = str | int  # text to encode, or a speaker number


def build_rows(config: Drama3Config, request: TTSRequest, tokenizer: Drama3Tokenizer | None = None) -> torch.Tensor:
    """Prompt rows for `request`; pass `tokenizer` to avoid reloading tokenizer.json on every call."""
    rows = _Rows(config, tokenizer if tokenizer is not None else load_tokenizer(config))
    target = _split_tagged(config, request.text, "request.text")
    if not isinstance(target[0], int):
        target = [0, *target]  # untagged text is spoken by speaker 0
    rows.literal(_SYSTEM_START)
    rows.literal(REFERENCE_INSTRUCTION if request.references else INSTRUCTION)
    for i, ref in enumerate(request.references):
        _add_reference(rows, config, ref, i)
    rows.literal(_USER_START)
    rows.text(target)
    rows.literal(_GENERATION_START)
    out = rows.tensor()
    if out.shape[0] > config.max_prompt_rows:
        raise ValueError(
            f"the prompt is {out.shape[0]} rows, over config.max_prompt_rows = {config.max_prompt_rows}; "
            "shorten the text or the references"
        )
    return out


def _add_reference(rows: _Rows, config: Drama3Config, ref: VoiceReference, i: int) -> None:
    where = f"request.references[{i}]"
    codes = _checked_codes(config, ref.codes, where)
    _check_speaker(config, ref.speaker, f"{where}.speaker")
    transcript = _split_tagged(config, ref.transcript, f"{where}.transcript")
    if not isinstance(transcript[0], int):
        transcript = [ref.speaker, *transcript]
    elif ref.speaker not in (0, transcript[0]):
        raise ValueError(
            f"{where}.transcript starts with <|speaker:{transcript[0]}|> but {where}.speaker is {ref.speaker}; "
            "drop the tag or make the two agree"
        )
    rows.literal(f"\n\n[Reference {i + 1}]\nText: ")
    rows.text(transcript)
    rows.literal("\nSpeech: ")
    rows.audio(codes)


class _Rows:
    """Accumulates text rows [id, 0 x 10] and audio rows [semantic_begin + code0, code0..code9]: the first column
    as Python ints, the audio codes as tensors, written into one tensor at the end (a few tensor ops, not a few per
    piece: the prompt is built on the time to first audio)."""

    def __init__(self, config: Drama3Config, tok: Drama3Tokenizer):
        self._semantic_begin = config.semantic_begin
        self._tok = tok
        self._first: list[int] = []  # column 0 of every row
        self._audio: list[tuple[int, torch.Tensor]] = []  # (first row, codes) of each audio block

    def literal(self, literal: str) -> None:
        """Template text: its structural tokens become special ids, the text between them is encoded."""
        for n, part in enumerate(_STRUCTURAL.split(literal)):  # odd indices are the structural tokens
            self._first += [self._tok.special_id(part)] if n % 2 else self._tok.encode_fixed(part)

    def text(self, pieces: list[Piece]) -> None:
        """Caller text: speaker numbers become their tags' special ids, the text pieces are encoded."""
        for p in pieces:
            self._first += [self._tok.special_id(f"<|speaker:{p}|>")] if isinstance(p, int) else self._tok.encode(p)

    def audio(self, codes: torch.Tensor) -> None:
        self._audio.append((len(self._first), codes))
        self._first += (self._semantic_begin + codes[0]).tolist()

    def tensor(self) -> torch.Tensor:
        out = torch.zeros(len(self._first), ROW_WIDTH, dtype=torch.long)
        out[:, 0] = torch.tensor(self._first, dtype=torch.long)
        for start, codes in self._audio:
            out[start:start + codes.shape[1], 1:] = codes.T
        return out


def _split_tagged(config: Drama3Config, text: str, where: str) -> list[Piece]:
    """Split caller text into text pieces and speaker numbers, rejecting every other <|...|> token."""
    pieces: list[Piece] = []
    pos = 0
    for m in _ANY_TOKEN.finditer(text):
        speaker = _SPEAKER.fullmatch(m.group(1))
        if speaker is None:
            raise ValueError(
                f"{where} contains the token {m.group(0)!r}; caller text may hold only speaker tags "
                f"<|speaker:0|>..<|speaker:{config.num_speakers - 1}|>: remove it"
            )
        _check_speaker(config, int(speaker.group(1)), f"{where} tag {m.group(0)}")
        pieces += [text[pos:m.start()], int(speaker.group(1))]
        pos = m.end()
    pieces.append(text[pos:])
    pieces = [p for p in pieces if p != ""]
    if not any(isinstance(p, str) and p.strip() for p in pieces):
        raise ValueError(f"{where} has no words to speak; give it some text")
    return pieces


def _check_speaker(config: Drama3Config, speaker: int, where: str) -> None:
    if not 0 <= speaker < config.num_speakers:
        raise ValueError(f"{where}: speaker {speaker} is outside 0..{config.num_speakers - 1}; use a speaker in range")


def _checked_codes(config: Drama3Config, codes: torch.Tensor, where: str) -> torch.Tensor:
    shape = f"({config.num_codebooks}, frames)"
    if not isinstance(codes, torch.Tensor):
        raise ValueError(f"{where}.codes must be an int64 tensor of shape {shape}; got {type(codes).__name__}")
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise ValueError(f"{where}.codes must be an int64 tensor of shape {shape}; got {codes.dtype}")
    if codes.ndim != 2 or codes.shape[0] != config.num_codebooks or codes.shape[1] == 0:
        raise ValueError(f"{where}.codes must have shape {shape} with at least one frame; got {tuple(codes.shape)}")
    codes = codes.to("cpu", torch.long)
    frames = codes.shape[1]
    max_frames = int(config.max_reference_seconds * config.frames_per_second)
    if frames > max_frames:
        raise ValueError(
            f"{where} is {frames / config.frames_per_second:.1f} s ({frames} frames), over "
            f"config.max_reference_seconds = {config.max_reference_seconds}; trim it to at most {max_frames} frames"
        )
    sizes = torch.tensor([config.codebook_size] + [config.codec.residual_codebook_size] * (config.num_codebooks - 1))
    lo, hi = torch.aminmax(codes, dim=1)
    bad = ((lo < 0) | (hi >= sizes)).nonzero()
    if len(bad):
        k = int(bad[0, 0])
        raise ValueError(
            f"{where}.codes[{k}] has values in [{int(lo[k])}, {int(hi[k])}], outside [0, {int(sizes[k])}); pass "
            "valid codec codes"
        )
    return codes
