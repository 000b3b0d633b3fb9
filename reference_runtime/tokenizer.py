"""Text tokenizer: a `tokenizers` byte-level BPE file plus the config's special-token ids.

The special tokens (config.SPECIAL_TOKENS) sit at the config's ids (the last ids of its text vocabulary), which
need not be their ids in the file: `load_tokenizer` looks each one up by name and maps it. The shipped
`tokenizer.json` (built by `build_tokenizer.py`) fits drama3-tiny; a real Drama 3 `tokenizer.json` drops in with
`load_tokenizer(config, path=...)` as long as it defines every special token by name and its BPE ids stay below
the config's special range.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer

from .config import SPECIAL_TOKENS, Drama3Config

DEFAULT_TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")


class Drama3Tokenizer:
    def __init__(self, tokenizer: Tokenizer, config: Drama3Config):
        self._tokenizer = tokenizer
        self._special_ids = {name: config.special_token_id(name) for name in SPECIAL_TOKENS}
        self._special_names = {i: name for name, i in self._special_ids.items()}
        self._first_special = min(self._special_ids.values())
        self._semantic_begin = config.semantic_begin
        self._vocab_size = config.vocab_size
        self._fixed: dict[str, list[int]] = {}

    def encode_fixed(self, text: str) -> list[int]:
        """`encode` of a prompt template's own text, remembered: the template's pieces are the same in every
        request, and each encode is on the time to first audio. Not for caller text, which would grow the memo."""
        if text not in self._fixed:
            self._fixed[text] = self.encode(text)
        return self._fixed[text]

    def encode(self, text: str) -> list[int]:
        """Plain text to ids: special-token strings inside `text` are encoded as ordinary characters."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        if ids and max(ids) >= self._first_special:
            raise ValueError(
                f"text {text[:40]!r} encodes to id {max(ids)}, inside the config's special-token range "
                f"[{self._first_special}, {self._semantic_begin}); the tokenizer file has added tokens that "
                "collide with it: use a tokenizer file made for this config's text_vocab_size"
            )
        return ids

    def special_id(self, name: str) -> int:
        if name not in self._special_ids:
            raise KeyError(f"{name!r} is not a special token; known: {list(SPECIAL_TOKENS)}")
        return self._special_ids[name]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text; special ids become their names, semantic-band ids become `<|semantic:k|>`."""
        parts: list[str] = []
        run: list[int] = []
        for i in (int(x) for x in ids):
            if 0 <= i < self._first_special:
                run.append(i)
                continue
            if run:
                parts.append(self._tokenizer.decode(run, skip_special_tokens=False))
                run = []
            if i in self._special_names:
                parts.append(self._special_names[i])
            elif self._semantic_begin <= i < self._vocab_size:
                parts.append(f"<|semantic:{i - self._semantic_begin}|>")
            else:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self._vocab_size})")
        if run:
            parts.append(self._tokenizer.decode(run, skip_special_tokens=False))
        return "".join(parts)


def load_tokenizer(config: Drama3Config, path: str | Path | None = None) -> Drama3Tokenizer:
    """Load a tokenizer.json (default: the shipped one) and map its special tokens, by name, to the config's ids."""
    path = Path(path) if path is not None else DEFAULT_TOKENIZER_PATH
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.encode_special_tokens = True  # caller text never yields structural ids; prompt.py adds those
    missing = [name for name in SPECIAL_TOKENS if tokenizer.token_to_id(name) is None]
    if missing:
        raise ValueError(f"tokenizer file {path} lacks the special tokens {missing}; add them as added tokens")
    first_special = config.special_token_id(SPECIAL_TOKENS[0])
    bpe_size = tokenizer.get_vocab_size(with_added_tokens=False)
    if bpe_size > first_special:
        raise ValueError(
            f"tokenizer file {path} has {bpe_size} BPE ids but config {config.name!r} reserves ids from "
            f"{first_special} for special tokens; use a tokenizer file made for this config"
        )
    return Drama3Tokenizer(tokenizer, config)
