"""Regression-test selection from the base tree and the patch, and the harness-apply check."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixgraph.config import RegressionSettings
from fixgraph.config import TestSettings as RunnerSettings
from fixgraph.dataset import Task
from scoring.execution import harness
from scoring.execution.choose_tests import is_test_file, module_name, select_tests
from tests.helpers.testrun_helpers import apply_to, diff_for, git, make_repo

UTIL = "def slugify(text):\n    return text.lower()\n\n\ndef shout(text):\n    return text.upper()\n"
SETUP = "from setuptools import setup\n\nsetup(name='pkg', install_requires=['Jinja2>=2.3'])\n"


def _repo(tmp_path: Path, files: dict[str, str]):
    from fixgraph.repo.workspace import RepoCache

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


@pytest.mark.slow
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
    from scoring.execution.testenv import SuiteRun, owned_by

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


def test_a_mirrored_test_tree_is_the_module_s_test_folder(tmp_path: Path) -> None:
    """src/_pkg/_code/code.py is tested in testing/code/ (pytest's layout), without a file named
    after it; the mirror is a signal of its own, weaker than the exact test module."""
    files = {"src/_pkg/__init__.py": "", "src/_pkg/_code/__init__.py": "", "src/_pkg/_code/code.py": UTIL,
             "testing/code/test_excinfo.py": "def test_e():\n    assert 1\n",
             "testing/code/test_source.py": "def test_s():\n    assert 1\n",
             "testing/test_recwarn.py": "def test_r():\n    assert 1\n",
             "tox.ini": "[pytest]\npython_files = test_*.py *_test.py testing/*/*.py\n",
             "testing/python/raises.py": "from _pkg._code.code import shout\n\ndef test_raises():\n    assert shout\n"}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "src/_pkg/_code/code.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings())
    assert set(sel.files) == {"testing/code/test_excinfo.py", "testing/code/test_source.py", "testing/python/raises.py"}
    assert sel.why["testing/code/test_excinfo.py"] == ["mirror: test folder of code"]
    # raises.py is a test file only by the repository's python_files pattern; it imports the module.
    assert sel.why["testing/python/raises.py"][0] == "imports _pkg._code.code"
    assert "testing/test_recwarn.py" not in sel.scores


@pytest.mark.slow
def test_a_root_test_file_importing_a_small_package_tests_its_modules(tmp_path: Path) -> None:
    """requests' test_requests.py sits at the root and says ``import requests``: for a small package
    that exercises every module; vendored code does not make the package big."""
    files = {"pkg/__init__.py": "from pkg.util import shout\n", "pkg/util.py": UTIL,
             "test_pkg.py": "import pkg\n\ndef test_p():\n    assert pkg.__name__ == 'pkg'\n"}
    files |= {f"pkg/packages/vendored/m{i}.py": "x = 1\n" for i in range(60)}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings())
    assert sel.files == ["test_pkg.py"] and sel.why["test_pkg.py"] == ["imports the package pkg (small)"]
    big = {"pkg/__init__.py": "", "pkg/util.py": UTIL, "test_pkg.py": "import pkg\n\ndef test_p():\n    assert pkg\n"}
    big |= {f"pkg/sub{i}.py": "x = 1\n" for i in range(60)}
    wt2 = _repo(tmp_path / "big", big)
    patch2 = apply_to(wt2, diff_for(tmp_path / "big", "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    assert select_tests(wt2, patch2, RegressionSettings()).files == []


@pytest.mark.slow
def test_the_selection_is_bounded_by_expected_seconds_measured_per_file(tmp_path: Path) -> None:
    """A file measured slow at an earlier base run is left out (with the reason) and the budget
    goes to the next; a file never measured is estimated from its test functions."""
    from scoring.execution.choose_tests import CostBook

    many = "import pkg.util\n\n" + "".join(f"def test_{i}():\n    assert 1\n" for i in range(50))
    files = {"pkg/util.py": UTIL, "tests/test_util.py": "import pkg.util\n\ndef test_a():\n    assert 1\n",
             "tests/test_slow.py": "from pkg.util import slugify\n\ndef test_b():\n    assert slugify\n",
             "tests/test_many.py": many}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    book = CostBook(tmp_path / "costs", "acme/pkg", "1.0")
    # One base run of the two files took 300 s; test_slow reported 2 of its 3 tests' results.
    book.record(wt, ["tests/test_slow.py", "tests/test_util.py"],
                {"tests/test_slow.py::test_b": "PASSED", "tests/test_slow.py::test_b2": "PASSED",
                 "tests/test_util.py::test_a": "PASSED"}, 300.0)
    assert CostBook(tmp_path / "costs", "acme/pkg", "1.0").book["tests/test_slow.py"] == {"s": 200.0, "n": 2}
    sel = select_tests(wt, patch, RegressionSettings(max_expected_s=150), costs=CostBook(tmp_path / "costs", "acme/pkg", "1.0"))
    assert "tests/test_slow.py: measured 200s, over regression.max_expected_s (42s left of 150s)" in sel.left_out
    # test_many was never measured, and 3 measured tests are too few for a rate (one slow file would
    # price every other file out): 50 tests at the default rate fit.
    assert sel.files == ["tests/test_util.py", "tests/test_many.py"]
    # With 20 tests measured, the repository's rate (here 1300 s over 23 tests) prices it.
    book.record(wt, ["tests/test_extra.py"], {f"tests/test_extra.py::test_{i}": "PASSED" for i in range(20)}, 1000.0)
    priced = select_tests(wt, patch, RegressionSettings(max_expected_s=150), costs=CostBook(tmp_path / "costs", "acme/pkg", "1.0"))
    assert priced.files == ["tests/test_util.py"]
    assert any(x.startswith("tests/test_many.py: estimated 2826s") for x in priced.left_out), priced.left_out
    roomy = select_tests(wt, patch, RegressionSettings(max_expected_s=1000), costs=CostBook(tmp_path / "costs", "acme/pkg", "1.0"))
    assert roomy.files == ["tests/test_util.py", "tests/test_slow.py"]
    # The best file runs whatever it costs (up to the run's timeout): a small budget only keeps others out.
    tight = select_tests(wt, patch, RegressionSettings(max_expected_s=10), costs=CostBook(tmp_path / "costs", "acme/pkg", "1.0"))
    assert tight.files == ["tests/test_util.py"]
    short = select_tests(wt, patch, RegressionSettings(max_expected_s=10, timeout_s=60),
                         costs=CostBook(tmp_path / "costs", "acme/pkg", "1.0"))
    assert "tests/test_util.py: measured 100s, over regression.timeout_s" in short.left_out
    # Without a cost book only the count and size bounds apply.
    assert len(select_tests(wt, patch, RegressionSettings()).files) == 3


def test_a_book_from_before_the_load_was_counted_is_read_at_a_quarter_until_measured_again(tmp_path: Path) -> None:
    """The books written before the costs were divided by the load were measured at 3.5 to 11.5
    processes per core: their files stay priced high (at a quarter), and a new measurement wins."""
    import json

    from scoring.execution.choose_tests import CostBook

    files = {"pkg/util.py": UTIL, "tests/test_util.py": "import pkg.util\n\ndef test_a():\n    assert 1\n"}
    wt = _repo(tmp_path, files)
    legacy = tmp_path / "costs" / "test-costs" / "acme+pkg__1.0.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"tests/test_util.py": {"s": 200.0, "n": 1}}))
    book = CostBook(tmp_path / "costs", "acme/pkg", "1.0")
    assert book.expected("tests/test_util.py", 1) == (50.0, "measured")
    legacy.write_text(json.dumps({f"tests/test_{i}.py": {"s": 100.0, "n": 10} for i in range(5)}))
    # ... and their seconds set no rate for the files they never measured (the default's 0.1 s).
    assert CostBook(tmp_path / "costs", "acme/pkg", "1.0").expected("tests/test_util.py", 1) == (0.1, "estimated")
    legacy.write_text(json.dumps({"tests/test_util.py": {"s": 200.0, "n": 1}}))
    book.record(wt, ["tests/test_util.py"], {"tests/test_util.py::test_a": "PASSED"}, 3.0)
    assert CostBook(tmp_path / "costs", "acme/pkg", "1.0").expected("tests/test_util.py", 1) == (3.0, "measured")
    assert json.loads(legacy.read_text()) == {"tests/test_util.py": {"s": 200.0, "n": 1}}  # never written


def test_among_files_with_the_same_evidence_the_cheaper_runs_first(tmp_path: Path) -> None:
    from scoring.execution.choose_tests import CostBook

    files = {"pkg/util.py": UTIL, "tests/test_a_slow.py": "import pkg.util\n\ndef test_a():\n    assert 1\n",
             "tests/test_b_fast.py": "import pkg.util\n\ndef test_b():\n    assert 1\n"}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", UTIL, UTIL.replace("upper", "title")))
    book = CostBook(tmp_path / "costs", "acme/pkg", "1.0")
    book.record(wt, ["tests/test_a_slow.py"], {"tests/test_a_slow.py::test_a": "PASSED"}, 30.0)
    book.record(wt, ["tests/test_b_fast.py"], {"tests/test_b_fast.py::test_b": "PASSED"}, 5.0)
    sel = select_tests(wt, patch, RegressionSettings(max_expected_s=20), costs=book)
    assert sel.files == ["tests/test_b_fast.py"] and list(sel.scores) == ["tests/test_b_fast.py", "tests/test_a_slow.py"]


def test_a_file_over_budget_gives_its_tests_that_name_a_specific_changed_name(tmp_path: Path) -> None:
    from scoring.execution.choose_tests import MAX_NAME_FILES, CostBook

    slow = ("from pkg.util import slugify, shout\n\n\ndef test_slug():\n    assert slugify('A')\n\n\n"
            "class TestShout:\n    def test_shout(self):\n        assert shout('a')\n\n    def test_none(self):\n"
            "        assert 1\n")
    files = {"pkg/util.py": UTIL, "tests/test_util.py": "import pkg.util\n\ndef test_a():\n    assert 1\n",
             "tests/test_slow.py": slow}
    # The class's name is in every test file: the package's vocabulary, not a pointer to its tests.
    files |= {f"tests/test_v{i}.py": "def test_v():\n    assert 'Util'\n" for i in range(MAX_NAME_FILES + 1)}
    util = "class Util:\n    pass\n\n\n" + UTIL
    files["pkg/util.py"] = util
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/util.py", util,
                                  util.replace("class Util:\n    pass", "class Util:\n    pass\n    x = 1").replace(
                                      "upper()", "upper() + '!'")))
    book = CostBook(tmp_path / "costs", "acme/pkg", "1.0")
    book.record(wt, ["tests/test_slow.py"], {f"tests/test_slow.py::t{i}": "PASSED" for i in range(30)}, 90.0)
    settings = RegressionSettings(max_expected_s=20)
    sel = select_tests(wt, patch, settings, costs=book, node_ids=True)
    assert {"Util", "shout"} <= set(sel.changed_names)
    assert "tests/test_slow.py" not in sel.files
    assert sel.tests == ["tests/test_slow.py::TestShout::test_shout"]
    # A runner that takes only files (sympy's bin/test) gets none.
    assert select_tests(wt, patch, settings, costs=book).tests == []


@pytest.mark.slow
def test_a_namesake_in_another_package_is_not_the_module_s_test_file(tmp_path: Path) -> None:
    """sympy/functions/combinatorial/numbers.py is tested by its package's tests/test_comb_numbers.py,
    not by sympy/core/tests/test_numbers.py, which tests sympy/core/numbers.py."""
    files = {"pkg/__init__.py": "", "pkg/core/numbers.py": UTIL, "pkg/core/tests/test_numbers.py": "def test_n():\n    assert 1\n",
             "pkg/comb/numbers.py": UTIL,
             "pkg/comb/tests/test_cnumbers.py": "def test_c():\n    assert 1\n",
             "pkg/tests/test_numbers_all.py": "def test_a():\n    assert 1\n"}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "pkg/comb/numbers.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings())
    assert "pkg/core/tests/test_numbers.py" not in sel.scores
    assert sel.files[0] == "pkg/comb/tests/test_cnumbers.py"
    assert sel.why["pkg/comb/tests/test_cnumbers.py"][0].startswith("mirror")
    # The package's own namesake still counts, as does a package-level test folder above it.
    own = apply_to(wt, diff_for(tmp_path, "pkg/core/numbers.py", UTIL, UTIL.replace("upper", "title")))
    wt.reset()
    assert select_tests(wt, own, RegressionSettings()).why["pkg/core/tests/test_numbers.py"][0].startswith("convention")


@pytest.mark.slow
def test_a_crowded_mirror_is_the_fallback_when_nothing_else_reaches_the_code(tmp_path: Path) -> None:
    """sphinx/ext/autodoc/typehints.py: no test names, imports or mirrors it within the cap, but
    eleven tests/test_ext_autodoc_*.py exercise autodoc: with nothing else they are run, bounded as
    ever; with any other evidence they are not."""
    files = {"sphinx/__init__.py": "", "sphinx/ext/__init__.py": "", "sphinx/ext/autodoc/__init__.py": "",
             "sphinx/ext/autodoc/typehints.py": UTIL, "tests/test_util_i18n.py": "def test_i():\n    assert 1\n"}
    files |= {f"tests/test_ext_autodoc_{i}.py": "def test_a():\n    assert 1\n" for i in range(11)}
    wt = _repo(tmp_path, files)
    patch = apply_to(wt, diff_for(tmp_path, "sphinx/ext/autodoc/typehints.py", UTIL, UTIL.replace("upper", "title")))
    sel = select_tests(wt, patch, RegressionSettings(max_files=4))
    assert len(sel.files) == 4 and all(f.startswith("tests/test_ext_autodoc_") for f in sel.files)
    assert sel.why[sel.files[0]] == ["kin: the crowded test folder of ext/autodoc"]
    assert "tests/test_util_i18n.py" not in sel.scores
    assert any("over regression.max_files" in why for why in sel.left_out)


    other = tmp_path / "with-a-conventional-test"
    other.mkdir()
    wt = _repo(other, files | {"tests/test_typehints.py": "def test_t():\n    assert 1\n"})
    patch = apply_to(wt, diff_for(other, "sphinx/ext/autodoc/typehints.py", UTIL, UTIL.replace("upper", "title")))
    assert select_tests(wt, patch, RegressionSettings()).files == ["tests/test_typehints.py"]
