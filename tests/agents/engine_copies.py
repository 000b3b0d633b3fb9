"""Engines built from transformed copies of the reference engine package, for the transform and offline-agent
tests (drama3-tiny on CPU)."""
from __future__ import annotations

import importlib
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

import reference_runtime.model as reference_model
from candidates.repo import engine_files, write_files
from knowledge_base.transforms import TRANSFORMS
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import ForcedLogits, teacher_forced
from reference_runtime.weights import init_weights
from swarm.edits import apply_edits, patch_edits

TINY = get_config("drama3-tiny")
CPU = torch.device("cpu")
REQUEST = TTSRequest(text="Hello there, fox.", max_frames=8, ignore_eos=True, seed=3)
REFERENCE_FILES = engine_files(Path(reference_model.__file__).parent)


@dataclass(frozen=True)
class ReferenceRun:
    files: dict[str, str]
    weights: dict[str, torch.Tensor]
    frames: torch.Tensor  # free-running frames of REQUEST
    rows: torch.Tensor
    logits: ForcedLogits  # teacher-forced on `frames`


def reference_run() -> ReferenceRun:
    weights = init_weights(TINY, seed=0, device=CPU)
    engine = reference_model.build_engine(TINY, weights, CPU)
    frames = engine.generate(REQUEST).frames
    rows = build_rows(TINY, REQUEST)
    return ReferenceRun(dict(REFERENCE_FILES), weights, frames, rows, teacher_forced(engine, rows, frames))


class PackageLoader:
    """Writes engine files under `root` and imports them under a fresh package name each time."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ids = itertools.count()
        sys.path.insert(0, str(root))

    def __call__(self, files: dict[str, str]):
        name = f"transformed_engine_{next(self._ids)}"
        write_files(files, self.root / name)
        return importlib.import_module(name)

    def close(self) -> None:
        sys.path.remove(str(self.root))


def transformed(files: dict[str, str], *steps: tuple[str, dict]) -> dict[str, str]:
    """`files` after each (transform name, params) step, applied through the strict edit path."""
    for name, params in steps:
        patches = TRANSFORMS[name].apply(files, params)
        files = apply_edits(files, patch_edits(patches))
    return files


def with_prerequisites(name: str, params: dict) -> list[tuple[str, dict]]:
    """The steps applying `name` after its required transforms (each with its default variant)."""
    steps = []
    for required in TRANSFORMS[name].requires:
        steps += with_prerequisites(required, next(TRANSFORMS[required].variants()))
    return steps + [(name, params)]
