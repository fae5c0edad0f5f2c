"""A checkout that git cannot make says why in one line: the cause git printed first."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.fixtures.repos import make_calc_repo
from fixgraph.repo.workspace import RepoCache, WorkspaceError


def test_a_commit_whose_file_content_the_mirror_lacks_says_which_file(tmp_path: Path) -> None:
    """A mirror stored without some large files' content (a snapshot that lists them but leaves them
    out): the checkout's error names the file git could not read, not git's last line
    ("fatal: Could not reset index file to revision 'HEAD'"), which says nothing of why."""
    inst = make_calc_repo(tmp_path / "mirrors")
    cache = RepoCache(tmp_path / "cache", tmp_path / "mirrors")
    bare = cache.ensure_clone(inst["repo"], inst["base_commit"])
    blob = bare.git.rev_parse(f"{inst['base_commit']}:calc/ops.py")
    loose = Path(bare.git_dir) / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()  # a fixture's clone keeps its objects loose
    loose.chmod(0o644)
    loose.unlink()
    with pytest.raises(WorkspaceError) as err:
        cache.worktree(inst["repo"], inst["base_commit"], "lacks-a-blob")
    assert str(err.value) == (f"cannot check out fixture/calc at {inst['base_commit'][:12]}: "
                              f"error: unable to read sha1 file of calc/ops.py ({blob})")
    assert not (tmp_path / "cache" / "worktrees" / "lacks-a-blob").exists()  # nothing half-made is kept
