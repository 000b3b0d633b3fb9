"""The engine package is forkable: a copy of reference_runtime/model/ under another name is a working engine."""
from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import torch

import reference_runtime.model as reference_model
from reference_runtime.api import TTSRequest
from reference_runtime.config import get_config
from reference_runtime.prompt import build_rows
from reference_runtime.teacher_forcing import teacher_forced
from reference_runtime.weights import init_weights

CFG = get_config("drama3-tiny")


def test_a_copied_package_matches_the_reference(tmp_path, monkeypatch):
    shutil.copytree(Path(reference_model.__file__).parent, tmp_path / "forked_engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))
    fork = importlib.import_module("forked_engine")
    weights = init_weights(CFG, seed=0, device="cpu")
    reference, candidate = (m.build_engine(CFG, weights, torch.device("cpu")) for m in (reference_model, fork))
    assert type(candidate).__module__ == "forked_engine.engine"
    request = TTSRequest(text="Fork me.", max_frames=6, ignore_eos=True)
    frames = reference.generate(request).frames
    assert torch.equal(candidate.generate(request).frames, frames)
    rows = build_rows(CFG, request)
    ours, theirs = teacher_forced(reference, rows, frames), teacher_forced(candidate, rows, frames)
    assert torch.equal(ours.main, theirs.main) and torch.equal(ours.codes, theirs.codes)
