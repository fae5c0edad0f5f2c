"""The Coder's search/replace edits against a real worktree."""

from __future__ import annotations

import pytest

from fixgraph.repo.edits import apply_edits
from fixgraph.repo.workspace import PatchError, RepoCache
from fixgraph.state import Edit


@pytest.fixture
def wt(calc, tmp_path):
    mirrors, inst = calc
    return RepoCache(tmp_path / "cache", mirrors).worktree(inst.repo, inst.base_commit, "edits")


def test_search_not_found_changes_nothing(wt):
    with pytest.raises(PatchError, match="search text not found"):
        apply_edits(wt, [Edit(path="calc/ops.py", search="return a * b\n", replace="x")])
    assert wt.diff() == ""


def test_ambiguous_search_is_refused(wt):
    with pytest.raises(PatchError, match="occurs 3 times"):
        apply_edits(wt, [Edit(path="calc/ops.py", search='    """', replace='    """')])


def test_all_or_nothing_across_edits(wt):
    good = Edit(path="calc/ops.py", search="    return a + b\n", replace="    return b + a\n")
    bad = Edit(path="calc/missing.py", search="x", replace="y")
    with pytest.raises(PatchError, match="does not exist"):
        apply_edits(wt, [good, bad])
    assert wt.diff() == ""


def test_trailing_whitespace_tolerated_and_new_file_created(wt):
    edits = [Edit(path="calc/ops.py", search="def add(a, b):   \n", replace="def add(a, b):\n    # sum\n"),
             Edit(path="calc/new.py", search="", replace="X = 1\n")]
    assert sorted(apply_edits(wt, edits)) == ["calc/new.py", "calc/ops.py"]
    diff = wt.diff()
    assert "+    # sum" in diff and "+++ b/calc/new.py" in diff


def test_paths_outside_or_in_git_are_refused(wt):
    for path in ("../x.py", "/etc/passwd", ".git/config"):
        with pytest.raises(PatchError):
            apply_edits(wt, [Edit(path=path, search="", replace="x")])


def test_worktree_apply_rejects_diff_escaping_the_repo(wt):
    evil = "--- a/../../evil.py\n+++ b/../../evil.py\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(PatchError, match="outside the repository"):
        wt.apply(evil)
    with pytest.raises(PatchError, match="empty patch"):
        wt.apply("")


def test_a_commit_that_cannot_be_checked_out_is_a_workspace_error(calc, tmp_path):
    """A mirror missing a blob (seen with astropy here): one clear reason, no half-made worktree."""
    import subprocess

    from fixgraph.repo.workspace import WorkspaceError

    mirrors, inst = calc
    cache = RepoCache(tmp_path / "cache", mirrors)
    bare = cache.ensure_clone(inst.repo, inst.base_commit)
    blob = bare.git.rev_parse(f"{inst.base_commit}:calc/ops.py")
    # Unpack, then drop the blob's object file.
    for pack in (cache.bare_path(inst.repo) / "objects" / "pack").glob("*.pack"):
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        subprocess.run(["git", "unpack-objects", "-q"], cwd=cache.bare_path(inst.repo), input=data, check=True)
    (cache.bare_path(inst.repo) / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(WorkspaceError, match="cannot check out fixture/calc"):
        cache.worktree(inst.repo, inst.base_commit, "broken")
    assert not (tmp_path / "cache" / "worktrees" / "broken").exists()
