"""A task's checkout is kept for the next task of its repository (moved, reset and cleaned), not
deleted and written again: the next worktree is exactly the fresh checkout it replaces."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixgraph.repo import workspace
from fixgraph.repo.workspace import RepoCache


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def mirror(tmp_path: Path) -> tuple[Path, str, str]:
    """Mirrors folder with acme/lib at two commits: (folder, first, second)."""
    repo = tmp_path / "mirrors" / "acme+lib"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "a.py").write_text("A = 1\n")
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("A = 2\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "b.py").write_text("B = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "two")
    return tmp_path / "mirrors", first, _git(repo, "rev-parse", "HEAD")


def _tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(path).parts}


def test_a_removed_worktree_is_kept_clean_and_the_next_task_gets_it_at_its_own_commit(mirror, tmp_path):
    mirrors, first, second = mirror
    cache = RepoCache(tmp_path / "cache", mirrors)
    wt = cache.worktree("acme/lib", second, "run__task-1")
    wt.apply("--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-A = 2\n+A = 'patched'\n")
    (wt.path / "scratch.py").write_text("x = 1\n")
    (wt.path / "out.log").write_text("ignored\n")
    cache.remove_worktree("acme/lib", wt)

    assert not wt.path.exists()
    [spare] = cache._spares("acme/lib")
    # Kept at its base commit with nothing of the task: no patch, no new or ignored file.
    assert _tree(spare) == {".gitignore": "*.log\n", "a.py": "A = 2\n", "pkg/b.py": "B = 1\n"}
    marker = (spare / ".gitignore").stat().st_ino  # a file both commits have alike

    nxt = cache.worktree("acme/lib", first, "run__task-2")
    assert cache._spares("acme/lib") == []
    assert (nxt.path / ".gitignore").stat().st_ino == marker  # moved, not written again
    assert _tree(nxt.path) == {".gitignore": "*.log\n", "a.py": "A = 1\n"}
    assert _git(nxt.path, "rev-parse", "HEAD") == first
    assert _git(nxt.path, "status", "--porcelain") == ""
    listed = _git(cache.bare_path("acme/lib"), "worktree", "list", "--porcelain")
    assert str(nxt.path) in listed and str(spare) not in listed


def test_spares_are_bounded_and_the_rest_deleted(mirror, tmp_path):
    mirrors, _, second = mirror
    cache = RepoCache(tmp_path / "cache", mirrors)
    wts = [cache.worktree("acme/lib", second, f"run__task-{i}") for i in range(workspace.SPARES_PER_REPO + 1)]
    for wt in wts:
        cache.remove_worktree("acme/lib", wt)
    assert len(cache._spares("acme/lib")) == workspace.SPARES_PER_REPO
    assert not any(wt.path.exists() for wt in wts)
    listed = _git(cache.bare_path("acme/lib"), "worktree", "list", "--porcelain")
    assert listed.count("worktree ") == 1 + workspace.SPARES_PER_REPO  # the bare clone and the spares


def test_a_spare_git_no_longer_knows_is_deleted_and_a_fresh_checkout_made(mirror, tmp_path):
    mirrors, first, second = mirror
    cache = RepoCache(tmp_path / "cache", mirrors)
    cache.remove_worktree("acme/lib", cache.worktree("acme/lib", second, "run__task-1"))
    [spare] = cache._spares("acme/lib")
    (spare / ".git").unlink()  # a half-deleted spare: not a worktree any more

    wt = cache.worktree("acme/lib", first, "run__task-2")
    assert not spare.exists()
    assert _tree(wt.path) == {".gitignore": "*.log\n", "a.py": "A = 1\n"}
