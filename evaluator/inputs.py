"""Fresh evaluation inputs, drawn from the evaluation's secret seed (E9, E11, E12, E25).

Correctness uses held-out prompts (random words, random lengths, a random voice reference on every other one),
never only the benchmark's texts. Benchmark trials keep each target prompt's shape but get a fresh random
suffix word, fresh reference codes and a fresh sampling seed on every trial, warmup or timed alike.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from reference_runtime.api import TTSRequest, VoiceReference
from reference_runtime.config import Drama3Config
from targets.schema import PromptSpec

WORDS = tuple(Path(__file__).with_name("words.txt").read_text().split())
MAX_WORDS = 24
REFERENCE_FRAMES = (8, 64)


def random_codes(config: Drama3Config, rng: random.Random, frames: int) -> torch.Tensor:
    """(10, frames) int64 codec codes: code 0 semantic, codes 1..9 residual."""
    gen = torch.Generator().manual_seed(rng.getrandbits(63))
    semantic = torch.randint(config.codebook_size, (1, frames), generator=gen)
    residual = torch.randint(config.codec.residual_codebook_size, (config.num_codebooks - 1, frames), generator=gen)
    return torch.cat((semantic, residual))


def random_frame(config: Drama3Config, rng: random.Random) -> torch.Tensor:
    """One audio row [semantic_begin + code0, code0..code9]."""
    codes = random_codes(config, rng, 1)[:, 0]
    return torch.cat((codes[:1] + config.semantic_begin, codes))


def sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + rng.choice(".?!")


def held_out_requests(config: Drama3Config, rng: random.Random, count: int, frames: int) -> list[TTSRequest]:
    """`count` prompts of `frames` frames each (ignore_eos, so the work and the compared length are fixed)."""
    requests = []
    for i in range(count):
        refs = ()
        if i % 2 == 1:
            n = rng.randint(*REFERENCE_FRAMES)
            refs = (VoiceReference(sentence(rng, rng.randint(2, 8)), random_codes(config, rng, n)),)
        requests.append(TTSRequest(text=sentence(rng, rng.randint(1, MAX_WORDS)), references=refs,
                                   seed=rng.getrandbits(31), max_frames=frames, ignore_eos=True))
    return requests


def trial_request(config: Drama3Config, prompt: PromptSpec, rng: random.Random, frames: int) -> TTSRequest:
    """A benchmark trial of `prompt`: fixed work (`frames`, ignore_eos), fresh suffix, codes and seed."""
    refs = ()
    if prompt.reference_frames > 0:
        transcript = prompt.reference_text or sentence(rng, 4)
        refs = (VoiceReference(transcript, random_codes(config, rng, prompt.reference_frames)),)
    return TTSRequest(text=f"{prompt.text} {rng.choice(WORDS)}", references=refs, seed=rng.getrandbits(31),
                      max_frames=frames, ignore_eos=True)


def prompt_label(index: int, request: TTSRequest) -> str:
    """How evidence names a held-out prompt: its index, length and whether it clones a voice."""
    voice = f", voice ref {request.references[0].codes.shape[1]} frames" if request.references else ""
    return f"held-out #{index} ({len(request.text.split())} words{voice}): {request.text[:60]!r}"

