"""The engines repository: the reference is a root commit, candidates are children, any commit materialises."""
from __future__ import annotations

import pytest

from candidates import EngineRepo, engine_files, write_files


def test_candidates_are_children_of_their_parent_and_materialise(tmp_path):
    write_files({"__init__.py": "from .engine import X\n", "engine.py": "X = 1\n"}, tmp_path / "ref")
    (tmp_path / "ref" / "__pycache__").mkdir()
    (tmp_path / "ref" / "__pycache__" / "engine.cpython-311.pyc").write_bytes(b"\0")
    repo = EngineRepo(tmp_path / "engines")
    root = repo.reference_commit(tmp_path / "ref")
    assert repo.reference_commit(tmp_path / "ref") == root and repo.info(root).parents == ()
    assert repo.files(root) == {"__init__.py": "from .engine import X\n", "engine.py": "X = 1\n"}

    files = {**repo.files(root), "engine.py": "X = 2\n", "kernels/fused.py": "Y = 3\n"}
    child = repo.commit_candidate(root, files, candidate_id="r-001.i001.s00", message="faster X\n\nwhy")
    info = repo.info(child)
    assert info.parents == (root,) and info.message.startswith("faster X")
    diff = repo.diff(root, child)
    assert "-X = 1" in diff and "+X = 2" in diff and "kernels/fused.py" in diff
    out = repo.materialise(child, tmp_path / "out")
    assert engine_files(out) == files
    repo.tag_kept("r-001.i001.s00", child)
    repo.set_run_branch("r-001", child)
    reopened = EngineRepo(tmp_path / "engines")
    assert reopened.files(child) == files

    (tmp_path / "ref" / "engine.py").write_text("X = 10\n")  # a changed reference is a new root
    new_root = repo.reference_commit(tmp_path / "ref")
    assert new_root != root and repo.info(new_root).parents == ()


def test_engine_paths_cannot_escape_the_package(tmp_path):
    with pytest.raises(ValueError, match="escapes"):
        write_files({"../evil.py": ""}, tmp_path / "pkg")
    with pytest.raises(FileNotFoundError, match="no engine files"):
        engine_files(tmp_path)
