"""The env check before a run: each (repo, version) with the interpreter and system packages it
needs, said without building anything."""

from __future__ import annotations

import json
from pathlib import Path

from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import RepoCache
from scoring.execution.readiness import check_tasks, summary_line, venv_envs
from tests.helpers.testrun_helpers import CALC, MINOR, REPO, TEST_FILE, git, make_repo, pinned_pyproject


def _task(repo: str, version: str, n: int) -> Task:
    return Task(repo=repo, instance_id=f"{repo.replace('/', '__')}-{n}", base_commit="0" * 40,
                problem_statement="x", version=version)


def test_a_repository_without_specs_is_inferred_at_its_build_and_nothing_is_built(tmp_path: Path) -> None:
    reports = check_tasks([_task("acme/none", "1.0", 1), _task("acme/none", "1.0", 2)], tmp_path, TestSettings())
    assert len(reports) == 1 and reports[0].state == "to build" and reports[0].runnable
    assert reports[0].tasks == ("acme__none-1", "acme__none-2")
    assert "inferred from the repository" in reports[0].reason
    assert summary_line(reports) == ""
    assert not (tmp_path / "envs").exists()


def _commits(root: Path, pyprojects: list[str], table: str = "") -> tuple[Path, list[str]]:
    """The calc fixture with one commit per pyproject.toml (and a committed table), cloned as a run
    clones it; returns (cache dir, the commits)."""
    mirrors, first = make_repo(root, {"calc.py": CALC, "tests/test_calc.py": TEST_FILE, "pyproject.toml": pyprojects[0],
                                      **({".fixgraph.toml": table} if table else {})})
    src, commits = mirrors / REPO.replace("/", "+"), [first]
    for text in pyprojects[1:]:
        (src / "pyproject.toml").write_text(text)
        (src / "calc.py").write_text(CALC + f"\n# {len(commits)}\n")
        git(src, "commit", "-qam", "next")
        commits.append(git(src, "rev-parse", "HEAD"))
    RepoCache(root / "cache", mirrors).ensure_clone(REPO)
    return root / "cache", commits


def _at(commit: str, n: int) -> Task:
    return Task(repo=REPO, instance_id=f"calc-{n}", base_commit=commit, problem_statement="x", version="")


def test_tasks_without_specs_are_grouped_by_the_env_their_commits_infer(tmp_path: Path) -> None:
    other = pinned_pyproject('[project.optional-dependencies]\ntest = ["pytest", "hypothesis"]\n')
    cache, (a, b, c) = _commits(tmp_path, [pinned_pyproject(""), pinned_pyproject(""), other])
    reports = check_tasks([_at(a, 1), _at(b, 2), _at(c, 3)], cache, TestSettings())
    assert [r.tasks for r in reports] == [("calc-1", "calc-2"), ("calc-3",)]
    assert all(r.env.startswith(f"{REPO} inferred ") and r.state == "to build" for r in reports)
    assert reports[0].env != reports[1].env and reports[0].python == MINOR
    assert "inferred (python from requires-python)" in reports[0].reason
    assert not (cache / "envs").exists()


def test_an_inferred_envs_record_is_found_built_or_failed(tmp_path: Path) -> None:
    cache, (a,) = _commits(tmp_path, [pinned_pyproject("")])
    envs = venv_envs(cache, TestSettings())
    task = _at(a, 1)
    path = envs.env_path(task, envs.spec_in(task, cache / "repos" / "fixture+calc.git"))
    assert path.name.startswith("fixture+calc__inferred-")
    path.mkdir(parents=True)
    (path / "env.json").write_text(json.dumps({"ok": True, "python_version": MINOR, "seconds": 12.5}))
    (rep,) = check_tasks([task], cache, TestSettings())
    assert (rep.state, rep.python, rep.seconds, rep.runnable) == ("built", MINOR, 12.5, True)
    (path / "env.json").write_text(json.dumps({"ok": False, "reason": "install step failed (pip install -e .): x\ny"}))
    (rep,) = check_tasks([task], cache, TestSettings())
    assert (rep.state, rep.reason, rep.runnable) == ("failed", "install step failed (pip install -e .): x", False)
    assert summary_line([rep]).startswith(f"scored without tests: 1 task ({REPO} inferred ")


def test_a_committed_table_that_cannot_be_read_is_the_checks_reason(tmp_path: Path) -> None:
    cache, (a,) = _commits(tmp_path, [pinned_pyproject("")], table="setup = [\n")
    (rep,) = check_tasks([_at(a, 1)], cache, TestSettings())
    assert rep.state == "failed" and not rep.runnable
    assert rep.reason.startswith(".fixgraph.toml is not valid TOML") and "\n" not in rep.reason
