"""Prompt builder: the exact reference-bracket-v1 rows, speaker tags, and every bad-input error."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.config import get_config
from reference_runtime.prompt import build_rows
from reference_runtime.tokenizer import load_tokenizer

TINY = get_config("drama3-tiny")
TOK = load_tokenizer(TINY)


def _expected_ids(*pieces: str) -> list[int]:
    """Spell the layout piece by piece: "<|name|>" pieces are special tokens, others are separate literals."""
    ids: list[int] = []
    for p in pieces:
        ids += [TOK.special_id(p)] if p.startswith("<|") else TOK.encode(p)
    return ids


def _codes(frames: int, seed: int = 0, config=TINY) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    semantic = torch.randint(0, config.codebook_size, (1, frames), generator=g)
    residual = torch.randint(0, config.codec.residual_codebook_size, (config.num_codebooks - 1, frames), generator=g)
    return torch.cat([semantic, residual])


def _audio_rows(codes: torch.Tensor, config=TINY) -> torch.Tensor:
    return torch.cat([config.semantic_begin + codes[:1], codes]).T


def test_rows_without_references():
    rows = build_rows(TINY, TTSRequest(text="Hello world."), TOK)
    expected = _expected_ids(
        "<|im_start|>", "system\n", "convert the provided text to speech",
        "<|im_end|>", "\n", "<|im_start|>", "user\n", "<|speaker:0|>", "Hello world.",
        "<|im_end|>", "\n", "<|im_start|>", "assistant\n", "<|voice|>",
    )
    assert rows.dtype == torch.long and rows.shape == (len(expected), 11)
    assert rows[:, 0].tolist() == expected
    assert not rows[:, 1:].any()
    assert TOK.decode(rows[:, 0]) == ("<|im_start|>system\nconvert the provided text to speech<|im_end|>\n"
                                      "<|im_start|>user\n<|speaker:0|>Hello world.<|im_end|>\n"
                                      "<|im_start|>assistant\n<|voice|>")


def test_template_text_is_encoded_once_and_caller_text_every_time():
    """The template's own pieces are memoised by the tokenizer (they sit on the time to first audio); caller text is
    encoded afresh and never memoised, so serving many texts does not grow the memo."""
    tok = load_tokenizer(TINY)
    build_rows(TINY, TTSRequest(text="First text."), tok)
    memo = dict(tok._fixed)
    assert "convert the provided text to speech" in memo and not any("First" in t for t in memo)
    build_rows(TINY, TTSRequest(text="Another text entirely."), tok)
    assert tok._fixed == memo
    before = build_rows(TINY, TTSRequest(text="First text."), tok)[:, 0].tolist()
    instruction = memo["convert the provided text to speech"]
    tok._fixed["convert the provided text to speech"] = [7]  # a memo is used: the next prompt shows it
    after = build_rows(TINY, TTSRequest(text="First text."), tok)[:, 0].tolist()
    at = 1 + len(memo["system\n"])  # after <|im_start|> and "system\n"
    assert before[at:at + len(instruction)] == instruction
    assert after == before[:at] + [7] + before[at + len(instruction):]


def test_rows_with_references():
    first, second = _codes(3, seed=1), _codes(2, seed=2)
    request = TTSRequest(text="<|speaker:1|>Target line.", references=(
        VoiceReference("<|speaker:1|>First transcript.", first),
        VoiceReference("Second one.", second, speaker=2),
    ))
    rows = build_rows(TINY, request, TOK)
    head = _expected_ids("<|im_start|>", "system\n", "convert the provided text to speech reference to the following:",
                         "\n\n[Reference 1]\nText: ", "<|speaker:1|>", "First transcript.", "\nSpeech: ")
    middle = _expected_ids("\n\n[Reference 2]\nText: ", "<|speaker:2|>", "Second one.", "\nSpeech: ")
    tail = _expected_ids("<|im_end|>", "\n", "<|im_start|>", "user\n", "<|speaker:1|>", "Target line.",
                         "<|im_end|>", "\n", "<|im_start|>", "assistant\n", "<|voice|>")

    def text_rows(ids):
        return torch.cat([torch.tensor(ids)[:, None], torch.zeros(len(ids), 10, dtype=torch.long)], dim=1)

    expected = torch.cat([text_rows(head), _audio_rows(first), text_rows(middle), _audio_rows(second), text_rows(tail)])
    assert torch.equal(rows, expected)


def test_speaker_tags_in_text_become_special_ids():
    rows = build_rows(TINY, TTSRequest(text="Hi <|speaker:3|>there.<|speaker:15|> Bye."), TOK)
    ids = rows[:, 0].tolist()
    user = ids.index(TOK.special_id("<|speaker:0|>"))  # untagged start: speaker 0 is prepended
    assert ids[user:user + 1 + len(TOK.encode("Hi "))] == _expected_ids("<|speaker:0|>", "Hi ")
    assert TOK.decode(ids).endswith("user\n<|speaker:0|>Hi <|speaker:3|>there.<|speaker:15|> Bye.<|im_end|>\n"
                                    "<|im_start|>assistant\n<|voice|>")


def test_default_tokenizer_and_full_config():
    request = TTSRequest(text="Hello.", references=(VoiceReference("Ref.", _codes(4, config=get_config("drama3")),),))
    full = get_config("drama3")
    rows = build_rows(full, request)
    assert torch.equal(rows, build_rows(full, request, load_tokenizer(full)))
    assert rows[0, 0] == full.special_token_id("<|im_start|>") and rows[-1, 0] == full.special_token_id("<|voice|>")
    audio = rows[:, 0] >= full.semantic_begin
    assert audio.sum() == 4 and torch.equal(rows[audio, 1:], request.references[0].codes.T)


def _request(text: str = "Hello.", **ref) -> TTSRequest:
    if not ref:
        return TTSRequest(text=text)
    reference = VoiceReference(ref.get("transcript", "Ref."), ref.get("codes", _codes(3)), ref.get("speaker", 0))
    return TTSRequest(text=text, references=(reference,))


def _bad_codes(k: int, value: int) -> torch.Tensor:
    codes = _codes(3)
    codes[k, 1] = value
    return codes


BAD_INPUTS = {
    "im_start": (_request("Hi <|im_start|>"), r"request.text contains the token '<\|im_start\|>'"),
    "im_end": (_request("Hi <|im_end|>"), r"contains the token '<\|im_end\|>'.*remove it"),
    "voice": (_request("<|voice|> hi"), r"contains the token '<\|voice\|>'"),
    "semantic": (_request("hi <|semantic:3|>"), r"contains the token '<\|semantic:3\|>'"),
    "unknown": (_request("hi <|text|>"), r"contains the token '<\|text\|>'"),
    "non_canonical_tag": (_request("<|speaker:01|>hi"), r"contains the token '<\|speaker:01\|>'"),
    "speaker_16": (_request("<|speaker:16|>hi"), r"speaker 16 is outside 0\.\.15"),
    "empty": (_request(""), r"request.text has no words to speak"),
    "blank": (_request(" \n\t"), r"request.text has no words to speak"),
    "tag_only": (_request("<|speaker:2|>  "), r"request.text has no words to speak"),
    "transcript_token": (_request(transcript="Ref <|im_end|>"),
                         r"references\[0\].transcript contains the token '<\|im_end\|>'"),
    "transcript_empty": (_request(transcript=""), r"references\[0\].transcript has no words"),
    "ref_speaker": (_request(speaker=16), r"references\[0\].speaker: speaker 16 is outside 0\.\.15"),
    "speaker_conflict": (_request(transcript="<|speaker:2|>Ref.", speaker=3), r"make the two agree"),
    "too_long": (_request(codes=_codes(1292)), r"60\.0 s \(1292 frames\).*max_reference_seconds.*1291 frames"),
    "semantic_code": (_request(codes=_bad_codes(0, 64)), r"codes\[0\] has values in \[\d+, 64\], outside \[0, 64\)"),
    "residual_code": (_request(codes=_bad_codes(9, 32)), r"codes\[9\] has values in \[\d+, 32\], outside \[0, 32\)"),
    "negative_code": (_request(codes=_bad_codes(4, -1)), r"codes\[4\] has values in \[-1, \d+\]"),
    "rows_9": (_request(codes=_codes(3)[:9]), r"shape \(10, frames\) with at least one frame; got \(9, 3\)"),
    "one_dim": (_request(codes=_codes(3)[0]), r"got \(3,\)"),
    "no_frames": (_request(codes=_codes(3)[:, :0]), r"got \(10, 0\)"),
    "float_codes": (_request(codes=_codes(3).float()), r"must be an int64 tensor.*got torch.float32"),
    "list_codes": (_request(codes=[[0]] * 10), r"must be an int64 tensor.*got list"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_errors(case):
    request, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        build_rows(TINY, request, TOK)


def test_longest_reference_is_accepted():
    rows = build_rows(TINY, _request(codes=_codes(1291)), TOK)
    assert (rows[:, 0] >= TINY.semantic_begin).sum() == 1291


def test_prompt_over_max_rows():
    limit = build_rows(TINY, _request("Hi."), TOK).shape[0]
    small = replace(TINY, max_prompt_rows=limit)
    assert build_rows(small, _request("Hi."), TOK).shape[0] == limit  # exactly at the cap is fine
    with pytest.raises(ValueError, match=rf"the prompt is \d+ rows, over config.max_prompt_rows = {limit}; shorten"):
        build_rows(small, _request("Hi.", codes=_codes(20)), TOK)
