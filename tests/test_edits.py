"""The Coder's search/replace edits against a real worktree."""

from __future__ import annotations

import pytest

from fixgraph.edits import apply_edits
from fixgraph.state import Edit
from fixgraph.workspace import PatchError, RepoCache


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
