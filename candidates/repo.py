"""The engines repository: a bare git repo where every engine is a commit.

The root commit is the reference engine (a copy of `reference_runtime/model/`); a candidate is a commit
parented on its parent engine (the reference or a kept engine), reachable from `refs/candidates/<id>`;
each run's lineage of kept engines is the branch `runs/<run_id>`; kept engines are tagged `kept/<id>`.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git

_IDENTITY = {"GIT_AUTHOR_NAME": "swarm", "GIT_AUTHOR_EMAIL": "swarm@localhost",
             "GIT_COMMITTER_NAME": "swarm", "GIT_COMMITTER_EMAIL": "swarm@localhost"}


def engine_files(package_dir: Path) -> dict[str, str]:
    """Source files of an engine package directory, by path relative to it (bytecode caches left out)."""
    files = {}
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[path.relative_to(package_dir).as_posix()] = path.read_text()
    if not files:
        raise FileNotFoundError(f"{package_dir}: no engine files (expected a copy of reference_runtime/model/)")
    return files


@dataclass(frozen=True, slots=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    message: str


class EngineRepo:
    """All engines of one SWARM_HOME. Only the orchestrator process writes to it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if (self.path / "HEAD").exists():
            self._repo = git.Repo(self.path)
        else:
            self._repo = git.Repo.init(self.path, bare=True, mkdir=True)

    def _git(self, *args: str, env: dict[str, str] | None = None) -> str:
        return self._repo.git.execute(["git", *args], env={**_IDENTITY, **(env or {})})

    def _write_tree(self, files: dict[str, str]) -> str:
        with tempfile.TemporaryDirectory(prefix="swarm-commit-") as tmp:
            work = Path(tmp, "tree")
            write_files(files, work)
            env = {"GIT_INDEX_FILE": str(Path(tmp, "index")), "GIT_WORK_TREE": str(work)}
            self._git("add", "-A", "--", ".", env=env)
            return self._git("write-tree", env=env)

    def _commit(self, tree: str, parents: list[str], message: str) -> str:
        parent_args = [arg for p in parents for arg in ("-p", p)]
        return self._git("commit-tree", tree, *parent_args, "-m", message)

    def reference_commit(self, package_dir: Path) -> str:
        """The commit holding this reference engine; created (as a new root) the first time its tree is seen."""
        tree = self._write_tree(engine_files(package_dir))
        tag = f"reference/{tree[:12]}"
        if tag in self._repo.tags:
            return self._repo.tags[tag].commit.hexsha
        sha = self._commit(tree, [], "reference engine\n\nA copy of reference_runtime/model/.")
        self._git("tag", tag, sha)
        self._git("update-ref", "refs/heads/reference", sha)
        return sha

    def commit_candidate(self, parent: str, files: dict[str, str], *, candidate_id: str, message: str) -> str:
        """Commit `files` (the whole engine package) as a child of `parent`; reachable from refs/candidates/."""
        sha = self._commit(self._write_tree(files), [parent], message)
        self._git("update-ref", f"refs/candidates/{candidate_id}", sha)
        return sha

    def tag_kept(self, engine_id: str, sha: str) -> None:
        self._git("tag", "-f", f"kept/{engine_id}", sha)

    def set_run_branch(self, run_id: str, sha: str) -> None:
        """Point `runs/<run_id>` at the run's best engine so far."""
        self._git("update-ref", f"refs/heads/runs/{run_id}", sha)

    def tree(self, sha: str) -> str:
        """The commit's tree id: equal trees are the same engine, whatever the commit message or parent."""
        return self._repo.commit(sha).tree.hexsha

    def files(self, sha: str) -> dict[str, str]:
        tree = self._repo.commit(sha).tree
        return {blob.path: blob.data_stream.read().decode() for blob in tree.traverse() if blob.type == "blob"}

    def materialise(self, sha: str, dest: Path) -> Path:
        """Write the engine at `sha` to `dest` (replaced if present) and return it."""
        if dest.exists():
            shutil.rmtree(dest)
        write_files(self.files(sha), dest)
        return dest

    def diff(self, parent: str, child: str) -> str:
        return self._git("diff", "--no-color", parent, child)

    def info(self, sha: str) -> CommitInfo:
        commit = self._repo.commit(sha)
        return CommitInfo(sha=commit.hexsha, parents=tuple(p.hexsha for p in commit.parents), message=commit.message)


def write_files(files: dict[str, str], dest: Path) -> None:
    for rel, text in files.items():
        path = dest / rel
        if os.path.isabs(rel) or ".." in Path(rel).parts:
            raise ValueError(f"engine file path {rel!r} escapes the package directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
