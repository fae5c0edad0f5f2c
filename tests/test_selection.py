"""Regression-test selection from the base tree and the patch, and the harness-apply check."""

from __future__ import annotations

from pathlib import Path

from fixgraph.config import RegressionSettings
from fixgraph.config import TestSettings as RunnerSettings
from fixgraph.dataset import Task
from scoring import harness
from scoring.selection import is_test_file, module_name, select_tests
from tests.testrun_helpers import apply_to, diff_for, git, make_repo

UTIL = "def slugify(text):\n    return text.lower()\n\n\ndef shout(text):\n    return text.upper()\n"
SETUP = "from setuptools import setup\n\nsetup(name='pkg', install_requires=['Jinja2>=2.3'])\n"


def _repo(tmp_path: Path, files: dict[str, str]):
    from fixgraph.workspace import RepoCache

    mirrors, commit = make_repo(tmp_path, files, repo="acme/pkg")
    cache = RepoCache(tmp_path / "cache", mirrors)
    return cache.worktree("acme/pkg", commit, "sel")


def test_convention_imports_and_names_rank_the_tests(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/text/util.py": UTIL,
        "pkg/text/tests/test_util.py": "from pkg.text.util import slugify\n\ndef test_s():\n    assert slugify('A') == 'a'\n",
        "tests/test_imports_it.py": "from pkg.text import util\n\ndef test_u():\n    assert util\n",
        "tests/test_names_it.py": "def test_n():\n    # slugify is documented here\n    assert True\n",
        "tests/test_unrelated.py": "def test_other():\n    assert 1\n",
        "docs/conf.py": "x = 1\n",
    }
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/text/util.py", UTIL, UTIL.replace("text.lower()", "text.lower().strip()")))
    sel = select_tests(wt, patch, RegressionSettings())
    assert sel.changed_modules == ["pkg/text/util.py"] and sel.changed_names == ["slugify"]
    assert sel.files == ["pkg/text/tests/test_util.py", "tests/test_imports_it.py", "tests/test_names_it.py"]
    assert "tests/test_unrelated.py" not in sel.scores
    assert sel.why["pkg/text/tests/test_util.py"][0].startswith("convention")


def test_selection_is_bounded_and_says_what_it_left_out(tmp_path: Path) -> None:
    files = {"pkg/util.py": UTIL, "tests/test_util.py": "import pkg.util\n\ndef test_a():\n    assert 1\n",
             "tests/test_big.py": "import pkg.util\n" + "# filler\n" * 20000}
    files |= {f"tests/test_more_{i}.py": "from pkg.util import slugify\n\ndef test_b():\n    assert 1\n"
              for i in range(4)}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings(max_files=2, max_file_bytes=50_000))
    assert sel.files[0] == "tests/test_util.py" and len(sel.files) == 2
    assert any(x.startswith("tests/test_big.py:") and "max_file_bytes" in x for x in sel.left_out)
    assert sum("over regression.max_files (2)" in x for x in sel.left_out) == 3


def test_a_repository_with_no_tests_selects_nothing(tmp_path: Path) -> None:
    wt = _repo(tmp_path, {"pkg/util.py": UTIL})
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings())
    assert sel.files == [] and sel.left_out == []


def test_test_file_names_and_module_names() -> None:
    assert is_test_file("tests/test_x.py") and is_test_file("pkg/x_test.py") and is_test_file("tests/tests.py")
    assert not is_test_file("tests/conftest.py") and not is_test_file("pkg/x.py") and not is_test_file("tests/x.txt")
    assert module_name("src/pkg/a/b.py") == "pkg.a.b" and module_name("pkg/__init__.py") == "pkg"


def test_a_patch_the_harness_cannot_apply_after_its_install_step_is_caught(tmp_path: Path) -> None:
    """swebench's pre-install steps edit setup.py (sphinx pins Jinja2 this way); a patch to the same
    line applies to the clean base and not to the tree the harness prepares."""
    wt = _repo(tmp_path, {"setup.py": SETUP, "pkg/util.py": UTIL})
    task = Task(instance_id="acme__pkg-1", repo="acme/pkg", base_commit=wt.base, problem_statement="x")
    steps = ["sed -i 's/Jinja2>=2.3/Jinja2<3.0/' setup.py"]
    settings = RunnerSettings(backend="local")
    clash = apply_to(wt, diff_for(tmp_path, "setup.py", SETUP, SETUP.replace("Jinja2>=2.3", "Jinja2>=2.5")))
    why = harness.harness_apply_error(task, wt, clash, steps, settings)
    assert "does not apply to the tree as the SWE-bench harness prepares it" in why and "setup.py" in why
    wt.reset()
    elsewhere = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    assert harness.harness_apply_error(task, wt, elsewhere, steps, settings) == ""
    assert git(wt.path, "status", "--porcelain") != ""  # the worktree still holds the patch


def test_only_the_files_own_tests_count() -> None:
    """A test of pytest prints the results of the inner sessions it runs; the log parser reads
    them too. They are nobody's tests: not a reproduction test's, not a selected file's."""
    from agents.reproducer import judge_run
    from scoring.testenv import SuiteRun, owned_by

    assert owned_by("testing/test_mark.py::test_x[a]", ["testing/test_mark.py"])
    assert not owned_by("test_select_simple.py::test_one", ["testing/test_mark.py"])
    assert owned_by("test_foo", ["sympy/core/tests/test_x.py"], {"test_foo"})
    assert not owned_by("test_bar (x.Y)", ["tests/x.py"], {"test_foo"})
    content = "def test_issue():\n    assert False\n"
    run = SuiteRun({"testing/test_issue.py::test_issue": "FAILED", "test_inner.py::test_func": "FAILED",
                    "testing/test_issue.py::test_other": "PASSED"}, "log", 1.0)
    assert judge_run(run, "testing/test_issue.py", content) == ("", ["testing/test_issue.py::test_issue"])
    only_inner = SuiteRun({"test_inner.py::test_func": "FAILED", "testing/test_issue.py::test_issue": "PASSED"},
                          "log", 1.0)
    assert "does not reproduce" in judge_run(only_inner, "testing/test_issue.py", content)[0]
    cut = SuiteRun({"testing/test_issue.py::test_issue": "PASSED"}, "log", 180.0, timed_out=True)
    assert "did not finish" in judge_run(cut, "testing/test_issue.py", content)[0]
