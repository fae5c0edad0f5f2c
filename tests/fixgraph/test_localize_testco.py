"""Co-change with the tests the issue matches (``RepoIndex._test_cochange``), on a fixture repository
with a crafted history.

The issue describes a behaviour the way a test exercises it: ``tests/test_display.py`` says the
issue's words, ``pkg/screen.py`` says some of them, and ``pkg/paths.py`` (where the fix goes) says
none. The test is named after a feature, not a module, so the tests-to-source names cannot reach
``paths.py``; the history can: two past fixes changed ``test_display.py`` and ``paths.py`` together.
A commit after the base changes the test with ``pkg/later.py``. Last, the benchmark grid's tie-break,
which chose the signal's weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fixgraph import localize
from fixgraph.localize import RepoIndex, combine
from tests.helpers.history_repo import _commit, _git

ISSUE = ("Displayed location is wrong after the working directory changes in a fixture\n\n"
         "When a fixture changes the working directory, the failure report shows the location "
         "relative to the new directory instead of the invocation directory.")

FILES = {
    "pkg/__init__.py": '"""The package."""\n',
    "pkg/screen.py": ('"""Writes the failure report to the screen."""\n\n\n'
                      "def show_failure(report, location):\n"
                      "    print('failure report', location)\n"),
    "pkg/paths.py": ('"""Path helpers."""\n\nimport os\n\n\n'
                     "def relpath(p, start):\n    return os.path.relpath(p, start)\n"),
    "pkg/later.py": "def unrelated():\n    return 0\n",
    "pkg/other.py": "def other():\n    return 1\n",
    "tests/test_display.py": (
        "def test_location_after_fixture_changes_working_directory(tmp_path, monkeypatch):\n"
        "    '''The failure report shows the location relative to the invocation directory,\n"
        "    also when a fixture changes the working directory.'''\n"
        "    monkeypatch.chdir(tmp_path)\n"
        "    location = 'test_x.py:3'\n"
        "    assert 'fixture' and 'working directory' and location\n"),
}


@dataclass
class CoRepo:
    git_dir: Path
    base: str
    later: str


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> CoRepo:
    root = tmp_path_factory.mktemp("testco")
    path = root / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "t@example.com")
    _git(path, "config", "user.name", "t")
    t, day = 1_600_000_000, 86400
    # Over CO_MAX_FILES files: an import says nothing about which files belong together.
    filler = {f"pkg/gen/mod_{i:02d}.py": f"def value_{i}():\n    return {i}\n" for i in range(20)}
    _commit(path, {**FILES, **filler}, "Initial import", t)
    # Two focused fixes: the test and the module it exercises changed together. Their messages
    # share no word with the issue, so the message-based history signal does not see them.
    for i in (1, 2):
        _commit(path, {"tests/test_display.py": FILES["tests/test_display.py"] + f"\n# case {i}\n",
                       "pkg/paths.py": FILES["pkg/paths.py"] + f"\n# case {i}\n"}, f"Handle case {i}", t + i * day)
    base = _commit(path, {"pkg/other.py": FILES["pkg/other.py"] + "\n# tidy\n"}, "Tidy", t + 3 * day)
    later = _commit(path, {"tests/test_display.py": FILES["tests/test_display.py"] + "\n# later\n",
                           "pkg/later.py": FILES["pkg/later.py"] + "\n# later\n"}, "Later change", t + 4 * day)
    return CoRepo(path / ".git", base, later)


def rank_of(ranked: list[localize.Candidate], path: str) -> float:
    """1 for the first file; a file no signal scores is not ranked at all."""
    paths = [c.path for c in ranked]
    return paths.index(path) + 1 if path in paths else float("inf")


def test_the_source_that_changed_with_the_matching_test_ranks_up(repo: CoRepo, tmp_path: Path) -> None:
    index = RepoIndex.build_from_git(repo.git_dir, repo.base, tmp_path / "c")
    parts = index.rank_parts(ISSUE)
    # The test matches the issue, and nothing but the history links it to paths.py.
    assert max(parts.today, key=lambda p: parts.today[p]) == "tests/test_display.py"
    assert "pkg/paths.py" not in parts.tests and "pkg/paths.py" not in parts.history
    assert max(parts.test_cochange, key=lambda p: parts.test_cochange[p]) == "pkg/paths.py"
    # Code files only: the test itself and its fellow tests are not handed a share.
    assert all(not p.startswith("tests/") for p in parts.test_cochange)
    without = combine(parts, 0, 0, 0, localize.W_TESTS, localize.W_TITLE, localize.W_PROSE, 0.0,
                      localize.W_LITERAL_TOP)
    shipped = index.rank(ISSUE)
    assert localize.W_TEST_COCHANGE > 0
    assert rank_of(without, "pkg/paths.py") == float("inf")  # no word of the issue in it
    assert rank_of(shipped, "pkg/paths.py") < rank_of(without, "pkg/paths.py")
    assert rank_of(shipped, "pkg/paths.py") == 2  # behind screen.py, which says the issue's words
    assert index.rank(ISSUE) == shipped  # deterministic


def test_a_commit_after_the_base_never_feeds_the_test_cochange(repo: CoRepo, tmp_path: Path) -> None:
    at_base = RepoIndex.build_from_git(repo.git_dir, repo.base, tmp_path / "c").rank_parts(ISSUE)
    assert "pkg/later.py" not in at_base.test_cochange
    # At the later commit the same query does see it: the assertion above can see a leak.
    after = RepoIndex.build_from_git(repo.git_dir, repo.later, tmp_path / "c").rank_parts(ISSUE)
    assert after.test_cochange.get("pkg/later.py", 0) > 0


def test_without_history_there_is_no_test_cochange(repo: CoRepo, tmp_path: Path) -> None:
    index = RepoIndex.build_from_git(repo.git_dir, repo.base, tmp_path / "c", history=False)
    assert index.rank_parts(ISSUE).test_cochange == {}
    assert [c.path for c in index.rank(ISSUE)][0] != "pkg/paths.py"


def test_the_grid_breaks_ties_by_the_mean_recall_over_the_first_ten_ranks() -> None:
    from eval.localization_bench import GRID, best_point

    low, high = GRID[0], GRID[1]  # high has a larger weight somewhere, all else equal
    assert tuple(-w for w in low) > tuple(-w for w in high)
    # Same recall@1 + recall@8 on both training rows; ``high`` moves a gold file from rank 10 to 9.
    recalls = {point: [(1.0, 1.0, 1.0), (0.0, 0.0, 0.1)] for point in GRID}
    recalls[high] = [(1.0, 1.0, 1.0), (0.0, 0.0, 0.2)]
    assert best_point(recalls, [0, 1]) == high
    # The simpler procedure: ties straight to the smaller weights.
    assert best_point(recalls, [0, 1], smooth=False) == low
    # The objective itself still comes first: a point better at rank 1 wins over any tie-break.
    recalls[GRID[2]] = [(1.0, 1.0, 1.0), (1.0, 1.0, 0.5)]
    assert best_point(recalls, [0, 1]) == GRID[2]
