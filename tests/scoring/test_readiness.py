"""The env check before a run: each (repo, version) with the interpreter and system packages it
needs, said without building anything."""

from __future__ import annotations

from pathlib import Path

from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from scoring.execution.readiness import check_tasks, summary_line


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
