"""eval.anyrepo_bench's maintainer tables: committed on top of the pinned commit in a scratch clone,
the mirror left alone, the same commit every run; each table is one the inference reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

from eval.anyrepo_bench import REPOS, TABLES, with_table
from scoring.execution.infer import load_overrides
from tests.helpers.testrun_helpers import make_repo


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_a_table_is_committed_on_top_of_the_pinned_commit_in_a_scratch_clone(tmp_path: Path) -> None:
    mirrors, commit = make_repo(tmp_path, {"calc.py": "X = 1\n"})
    mirror = mirrors / "fixture+calc"
    refs = _git(mirror, "for-each-ref")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    clone, added = with_table(mirror, commit, 'services = ["memcached"]\n', tmp_path / "a")
    again, same = with_table(mirror, commit, 'services = ["memcached"]\n', tmp_path / "b")
    assert added == same and added != commit
    assert _git(clone, "rev-parse", f"{added}^") == commit
    assert _git(clone, "show", f"{added}:.fixgraph.toml") == 'services = ["memcached"]'
    assert _git(clone, "show", f"{added}:calc.py") == "X = 1"
    assert _git(mirror, "for-each-ref") == refs
    assert subprocess.run(["git", "cat-file", "-e", added], cwd=mirror).returncode != 0  # the mirror is untouched


def test_every_table_names_a_listed_repository_and_reads(tmp_path: Path) -> None:
    for repo, table in TABLES.items():
        assert repo in {r[0] for r in REPOS}
        (tmp_path / ".fixgraph.toml").write_text(table)
        overrides, source = load_overrides(tmp_path)
        assert source == ".fixgraph.toml" and overrides["services"]
