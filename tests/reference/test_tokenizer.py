"""Tokenizer: round trip, special tokens at the config's ids, drop-in files, deterministic shipped build."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from reference_runtime.build_tokenizer import BPE_VOCAB_SIZE, TOKENIZER_PATH, build_tokenizer, serialize
from reference_runtime.config import SPECIAL_TOKENS, get_config
from reference_runtime.tokenizer import load_tokenizer

TINY = get_config("drama3-tiny")
FULL = get_config("drama3")


@pytest.mark.parametrize("text", [
    "Hello, world!",
    "  leading and trailing spaces \n\ttabs and newlines\n",
    "naïve café, 東京, Ωmega, emoji 🎭🎙️",
    "Numbers 3.14 and 2024-06-21, quotes \"like this\" and 'that'.",
])
def test_round_trip(text):
    tok = load_tokenizer(TINY)
    ids = tok.encode(text)
    assert ids and all(0 <= i < BPE_VOCAB_SIZE for i in ids)
    assert tok.decode(ids) == text


def test_bpe_merges_compress_english():
    tok = load_tokenizer(TINY)
    text = "The lighthouse keeper climbed the stairs."
    assert len(tok.encode(text)) < len(text.encode()) * 0.7


def test_special_token_strings_in_text_are_plain_text():
    tok = load_tokenizer(TINY)
    text = "<|im_start|>user<|speaker:3|> hi<|voice|>"
    ids = tok.encode(text)
    assert all(i < BPE_VOCAB_SIZE for i in ids)
    assert tok.decode(ids) == text


@pytest.mark.parametrize("config", [TINY, FULL], ids=lambda c: c.name)
def test_special_ids_are_the_config_ids(config):
    tok = load_tokenizer(config)
    for n, name in enumerate(SPECIAL_TOKENS):
        assert tok.special_id(name) == config.special_token_id(name) == config.text_vocab_size - len(SPECIAL_TOKENS) + n
        assert tok.decode([tok.special_id(name)]) == name
    assert tok.special_id("<|im_end|>") == config.eos_token_id


def test_decode_mixes_text_specials_and_semantic_tokens():
    tok = load_tokenizer(TINY)
    ids = [tok.special_id("<|speaker:2|>"), *tok.encode("Hi"), TINY.semantic_begin + 5, tok.special_id("<|im_end|>")]
    assert tok.decode(ids) == "<|speaker:2|>Hi<|semantic:5|><|im_end|>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([TINY.vocab_size])
    with pytest.raises(KeyError, match="not a special token"):
        tok.special_id("<|speaker:16|>")


def _edited_file(tmp_path, edit) -> str:
    data = json.loads(TOKENIZER_PATH.read_text())
    edit(data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_drop_in_file_specials_are_found_by_name(tmp_path):
    def reverse_special_ids(data):
        ids = [t["id"] for t in data["added_tokens"]]
        for t, i in zip(data["added_tokens"], reversed(ids)):
            t["id"] = i

    tok = load_tokenizer(TINY, path=_edited_file(tmp_path, reverse_special_ids))
    for name in SPECIAL_TOKENS:
        assert tok.special_id(name) == TINY.special_token_id(name)
        assert tok.decode([tok.special_id(name)]) == name
    assert tok.encode("hello") == load_tokenizer(TINY).encode("hello")


def test_file_without_a_special_token_is_rejected(tmp_path):
    def drop_voice(data):
        data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "<|voice|>"]

    with pytest.raises(ValueError, match=r"lacks the special tokens \['<\|voice\|>'\]"):
        load_tokenizer(TINY, path=_edited_file(tmp_path, drop_voice))


def test_file_too_big_for_the_config_is_rejected():
    with pytest.raises(ValueError, match="reserves ids from 237"):
        load_tokenizer(replace(TINY, text_vocab_size=256))


def _merge_pairs(data: dict) -> list[tuple[str, ...]]:
    # older tokenizers serialise merges as "a b" strings, newer ones as pairs
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]


def test_shipped_file_is_the_deterministic_build():
    built = json.loads(serialize(build_tokenizer()))
    shipped = json.loads(TOKENIZER_PATH.read_text())
    assert len(shipped["model"]["vocab"]) == BPE_VOCAB_SIZE
    assert built["model"]["vocab"] == shipped["model"]["vocab"]
    assert _merge_pairs(built) == _merge_pairs(shipped)
    assert [(t["id"], t["content"]) for t in built["added_tokens"]] == \
        [(t["id"], t["content"]) for t in shipped["added_tokens"]]
