"""django's layout on a fixture repository: the Reproducer's test in tests/<app>/test_<x>.py run by
its label through a runtests.py-style runner, and the regression selection over test apps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agents.reproducer import check_draft, judge_run
from eval.fixtures.django_repo import FILES, REPRO_PATH, REPRO_TEST, TEXT, TEXT_FIXED
from fixgraph.config import RegressionSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import RepoCache, Worktree
from fixgraph.state import ReproTestDraft
from scoring.execution import django_layout
from scoring.execution.choose_tests import select_tests
from scoring.execution.outcomes import ReproTest, baseline, own_outcome
from scoring.execution.runner import make_runner
from scoring.execution.testenv import Suite
from scoring.runtime.findings import runtime_findings
from scoring.runtime.issue_run import DJANGO_PRELUDE, prelude_for
from tests.helpers.testrun_helpers import apply_to, diff_for, local_settings, make_repo

DJANGO = "django/django"


@pytest.fixture
def django_wt(tmp_path: Path) -> tuple[Worktree, Task]:
    mirrors, commit = make_repo(tmp_path, FILES, repo=DJANGO)
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(DJANGO, commit, "dj")
    # 4.0: the spec's test command is ./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1
    task = Task(instance_id="django__django-1", repo=DJANGO, base_commit=commit, problem_statement="wrap(x, 0)",
                version="4.0")
    return wt, task


def _ctx(wt: Worktree, repo: str = DJANGO) -> Any:
    return SimpleNamespace(worktree=wt, task=SimpleNamespace(repo=repo))


def test_the_reproducers_test_must_sit_in_an_existing_test_app_as_a_test_case(django_wt) -> None:
    wt, _ = django_wt
    ctx = _ctx(wt)
    assert check_draft(ReproTestDraft(path=REPRO_PATH, content=REPRO_TEST, explanation=""), ctx) == ""
    nowhere = check_draft(ReproTestDraft(path="tests/no_such_app/test_x.py", content=REPRO_TEST, explanation=""),
                          ctx)
    assert "no test app tests/no_such_app/" in nowhere
    top = check_draft(ReproTestDraft(path="tests/test_wrap.py", content=REPRO_TEST, explanation=""), ctx)
    assert "tests/<app>/test_<x>.py" in top
    # the app's tests.py, django's usual test module (unittest's pattern test*.py), is a place too
    assert check_draft(ReproTestDraft(path="tests/i18n/tests.py", content=REPRO_TEST, explanation=""), ctx) == ""
    helper = check_draft(ReproTestDraft(path="tests/i18n/helpers.py", content=REPRO_TEST, explanation=""), ctx)
    assert "not where django keeps tests" in helper
    functions = check_draft(ReproTestDraft(path=REPRO_PATH, content="def test_x():\n    assert 0\n",
                                         explanation=""), ctx)
    assert "unittest test cases only" in functions
    mixin = ("import unittest\n\n\nclass Mixin:\n    def test_x(self):\n        assert 0\n\n\n"
             "class Concrete(Mixin, unittest.TestCase):\n    backend = 1\n")
    assert check_draft(ReproTestDraft(path=REPRO_PATH, content=mixin, explanation=""), ctx) == ""
    alone = mixin.split("\n\n\nclass Concrete")[0] + "\n"
    assert "unittest test cases only" in check_draft(ReproTestDraft(path=REPRO_PATH, content=alone, explanation=""), ctx)


@pytest.mark.slow
def test_the_test_runs_by_its_label_fails_at_the_base_and_passes_with_the_fix(django_wt, tmp_path: Path) -> None:
    wt, task = django_wt
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    test = ReproTest(REPRO_PATH, REPRO_TEST, ())
    run = baseline(runner, task, wt, test.suite(60))
    problem, failing = judge_run(run, REPRO_PATH, REPRO_TEST)
    assert problem == "" and len(failing) == 1
    assert failing[0].startswith("test_zero_width (utils_tests.test_wrap_zero.WrapZeroWidthTests")
    fix = apply_to(wt, diff_for(tmp_path, "django/utils/text.py", TEXT, TEXT_FIXED))
    after = runner.run_suite(task, wt, fix, ReproTest(REPRO_PATH, REPRO_TEST, tuple(failing)).suite(60))
    assert ReproTest(REPRO_PATH, REPRO_TEST, tuple(failing)).statuses_after(after) == {failing[0]: "PASSED"}


@pytest.mark.slow
def test_a_label_the_runner_cannot_import_is_refused_with_its_output(django_wt, tmp_path: Path) -> None:
    wt, task = django_wt
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    content = "import no_such_module\nimport unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n"
    path = "tests/utils_tests/test_broken_label.py"
    run = runner.run_suite(task, wt, None, Suite(targets=(path,), added=((path, content),), timeout_s=60))
    problem, failing = judge_run(run, path, content)
    assert failing == [] and "could not import the label utils_tests.test_broken_label" in problem
    assert "no_such_module" in problem  # the runner's own words


def test_selection_knows_test_apps_and_leaves_out_other_databases(django_wt, tmp_path: Path) -> None:
    wt, _ = django_wt
    patch = apply_to(wt, diff_for(tmp_path, "django/utils/text.py", TEXT, TEXT_FIXED))
    for repo in (DJANGO, "acme/fork"):  # django by name, or by its tests/runtests.py
        sel = select_tests(wt, patch, RegressionSettings(), repo=repo, node_ids=True)
        assert sel.files[0] == "tests/utils_tests/test_text.py"
        assert sel.why["tests/utils_tests/test_text.py"][0].startswith("convention")
        assert "tests/i18n/tests.py" in sel.files  # imports the changed module
        assert "tests/test_sqlite.py" not in sel.scores and "tests/runtests.py" not in sel.scores
        assert "tests/postgres_tests/test_search.py" not in sel.files
        assert any(r.startswith("tests/postgres_tests/test_search.py: not runnable here, needs a PostgreSQL")
                   for r in sel.left_out)


def test_django_ids_belong_to_their_modules_files() -> None:
    files = ["tests/utils_tests/test_text.py"]
    assert django_layout.owning_file("test_wrap (utils_tests.test_text.TestUtilsText)", files) == files[0]
    assert django_layout.owning_file("test_wrap (utils_tests.test_text.TestUtilsText.test_wrap)", files) == files[0]
    assert django_layout.owning_file("test_wrap (utils_tests.test_textual.T)", files) is None
    assert django_layout.is_failed_import("utils_tests.test_x (unittest.loader._FailedTest.utils_tests.test_x)")
    assert django_layout.not_runnable("tests/backends/mysql/test_creation.py")
    assert django_layout.not_runnable("tests/dbshell/test_postgresql.py")
    assert not django_layout.not_runnable("tests/dbshell/test_sqlite.py")


def test_the_replay_configures_django_unless_the_snippet_does() -> None:
    uses = ["from django.db import models\nprint(models.Q(a=1))\n"]
    assert prelude_for(DJANGO, uses) == DJANGO_PRELUDE
    assert prelude_for(DJANGO, ["from django.conf import settings\nsettings.configure()\n"]) == ""
    assert prelude_for(DJANGO, ["print(1)\n"]) == ""
    assert "settings.configure(" in DJANGO_PRELUDE and "sqlite3" in DJANGO_PRELUDE


@pytest.mark.slow
def test_a_django_test_s_error_is_a_runtime_finding_though_another_s_traceback_comes_last(
        django_wt, tmp_path: Path) -> None:
    """The patch makes capfirst raise and wrap return a wrong result: unittest prints the ERROR
    blocks first and the FAIL's assertion last; the errors are still read, each under its test."""
    wt, task = django_wt
    broken = (TEXT.replace("value[0].upper() + value[1:]", "value[0].upper() + value[1:] + 1")
              .replace("for i in range(0, len(text), width)]", "for i in range(0, len(text), width)][:1]"))
    patch = apply_to(wt, diff_for(tmp_path, "django/utils/text.py", TEXT, broken))
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    outcome = own_outcome(runner, task, wt, patch, [], RegressionSettings(base_runs=1))
    # "test_x (app.module.Class)", or "...Class.test_x)" from Python 3.11
    types = {r["test"].split(" (")[0]: r["type"] for r in outcome.regression_crashes}
    assert types == {"test_capfirst": "TypeError", "test_cap": "TypeError", "test_wrap": "AssertionError"}
    [found] = runtime_findings(outcome, patch)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["symbol"]) == ("TypeError", "django/utils/text.py", "capfirst")
    assert "(and 1 more tests)" in finding["message"]
