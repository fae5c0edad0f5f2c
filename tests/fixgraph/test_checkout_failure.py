"""A checkout that fails says why in one line: a mirror that lacks a file's content (a snapshot that
left out its largest files) is named with the file, not as git's "Could not reset index file"."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixgraph.repo.workspace import RepoCache, WorkspaceError


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _mirror_with(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path, str]:
    """Mirrors folder with acme/lib at one commit holding ``files``: (folder, repo, commit)."""
    repo = tmp_path / "mirrors" / "acme+lib"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    return tmp_path / "mirrors", repo, _git(repo, "rev-parse", "HEAD")


def _drop_blob(repo: Path, commit: str, rel: str) -> str:
    """Delete the loose object of ``rel``'s content at ``commit``, as a partial snapshot lacks it."""
    blob = _git(repo, "rev-parse", f"{commit}:{rel}")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return blob


def test_a_checkout_whose_file_content_the_mirror_lacks_names_the_file(tmp_path):
    mirrors, repo, commit = _mirror_with(tmp_path, {"a.py": "A = 1\n", "data/eop.txt": "1962 0.1\n" * 50})
    blob = _drop_blob(repo, commit, "data/eop.txt")
    cache = RepoCache(tmp_path / "cache", mirrors)

    with pytest.raises(WorkspaceError) as err:
        cache.worktree("acme/lib", commit, "run__task-1")

    message = str(err.value)
    assert message == (f"cannot check out acme/lib at {commit[:12]}: the mirror lacks the content of "
                       f"data/eop.txt (blob {blob[:12]}), so the commit cannot be checked out")
    assert "\n" not in message
    # No half-made worktree is left for the next call to reuse.
    assert not (tmp_path / "cache" / "worktrees" / "run__task-1").exists()


def test_two_lacking_files_name_the_first_and_count_the_others(tmp_path):
    mirrors, repo, commit = _mirror_with(tmp_path, {"a.py": "A = 1\n", "b.dat": "b\n" * 40, "c.dat": "c\n" * 40})
    _drop_blob(repo, commit, "b.dat")
    _drop_blob(repo, commit, "c.dat")

    with pytest.raises(WorkspaceError, match=r"lacks the content of [bc]\.dat \(blob [0-9a-f]{12}\) and 1 more"):
        RepoCache(tmp_path / "cache", mirrors).worktree("acme/lib", commit, "run__task-1")


def test_any_other_checkout_failure_keeps_gits_last_line(tmp_path):
    mirrors, repo, commit = _mirror_with(tmp_path, {"a.py": "A = 1\n"})
    cache = RepoCache(tmp_path / "cache", mirrors)
    cache.ensure_clone("acme/lib", commit)
    # The clone's tree object of the commit is gone: git fails before any file's content.
    tree = _git(repo, "rev-parse", f"{commit}^{{tree}}")
    (cache.bare_path("acme/lib") / "objects" / tree[:2] / tree[2:]).unlink()

    with pytest.raises(WorkspaceError) as err:
        cache.worktree("acme/lib", commit, "run__task-1")
    assert str(err.value).startswith(f"cannot check out acme/lib at {commit[:12]}: ")
    assert "lacks the content" not in str(err.value) and "\n" not in str(err.value)
