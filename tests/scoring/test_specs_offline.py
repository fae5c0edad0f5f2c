"""Install specs come from the package itself: no package index, no subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixgraph.sandbox.process import netns_prefix
from scoring.execution import specs


@pytest.fixture
def shipped_only(monkeypatch: pytest.MonkeyPatch):
    """swebench as 5.x ships it: no MAP_REPO_VERSION_TO_SPECS, so the shipped table is read."""
    from swebench.harness import constants

    monkeypatch.delattr(constants, "MAP_REPO_VERSION_TO_SPECS", raising=False)
    specs._specs_tables.cache_clear()
    yield
    specs._specs_tables.cache_clear()


def test_specs_come_from_package_data_without_any_subprocess(
        shipped_only: None, tmp_path: Path, spawned: list[tuple[Any, dict[str, str]]]) -> None:
    django = specs.repo_specs(tmp_path, "django/django", "3.0")
    sympy = specs.repo_specs(tmp_path, "sympy/sympy", "1.1")
    assert django is not None and sympy is not None
    assert django["test_cmd"].startswith("./tests/runtests.py")
    assert sympy["test_cmd"].endswith("bin/test -C --verbose")
    assert specs.requirements_paths(tmp_path, "django/django") == ["tests/requirements/py3.txt"]
    assert specs.repo_specs(tmp_path, "fixture/calc", "1.0") is None
    assert spawned == []  # no pip download, nothing else
    assert not (tmp_path / "swebench-specs").exists()


def test_shipped_table_covers_the_swebench_repos_and_says_where_it_came_from() -> None:
    data = json.loads((Path(specs.__file__).parent / specs.SPECS_DATA).read_text())
    assert "swebench-4.1.0" in data["provenance"] and "eval.make_specs" in data["provenance"]
    assert len(data["specs"]) == 12
    for repo, versions in data["specs"].items():
        assert versions, repo
        assert all("test_cmd" in spec and "python" in spec for spec in versions.values()), repo


@pytest.mark.slow
@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_specs_load_with_the_network_cut() -> None:
    code = ("from pathlib import Path\nfrom swebench.harness import constants as c\n"
            "c.__dict__.pop('MAP_REPO_VERSION_TO_SPECS', None)\n"
            "from scoring.execution.specs import repo_specs\n"
            "print(repo_specs(Path('.'), 'pytest-dev/pytest', '5.4')['test_cmd'])")
    prefix = netns_prefix()
    assert prefix is not None
    out = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(specs.__file__).parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pytest -rA"


SYMPY_LOG = """sympy/core/tests/test_numbers.py[3]
test_one ok
test_two F
test_mod F                                                                [FAIL]

________________________________________________________________________________
__________________ sympy/core/tests/test_numbers.py:test_two ___________________
AssertionError
________________________________________________________________________________
__________________ sympy/core/tests/test_numbers.py:test_mod ___________________
AssertionError

============= tests finished: 1 passed, 2 failed, in 0.02 seconds ==============
"""


def test_a_sympy_failure_has_the_id_its_pass_will_have():
    """The last test of a sympy file that fails is found only under its failure header
    (``path:test_mod``); it passes as ``test_mod``. One id for both, or the fix reads as MISSING."""
    from scoring.execution.specs import parse_log

    statuses = parse_log("sympy/sympy", SYMPY_LOG)
    assert statuses == {"test_one": "PASSED", "test_two": "FAILED", "test_mod": "FAILED"}
    fixed = """sympy/core/tests/test_numbers.py[3]
test_one ok
test_two ok
test_mod ok                                                                 [OK]

============= tests finished: 3 passed, in 0.02 seconds ==============
"""
    assert parse_log("sympy/sympy", fixed) == {"test_one": "PASSED", "test_two": "PASSED", "test_mod": "PASSED"}


DJANGO_SUBTEST_LOG = """test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ...
test_help_text (auth_tests.test_validators.UsernameValidatorsTests) ... ok
test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests.test_unicode_validator) ...

======================================================================
FAIL: test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) (invalid='trailingnewline\\n')
----------------------------------------------------------------------
AssertionError: ValidationError not raised

======================================================================
ERROR: test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests.test_unicode_validator) (invalid='x')
----------------------------------------------------------------------
TypeError: boom

----------------------------------------------------------------------
Ran 3 tests in 0.001s

FAILED (failures=1, errors=1)
"""


def test_a_django_test_whose_subtests_fail_is_failed_under_its_full_id():
    """unittest prints no status on the line of a test whose subTest failed; the failure header
    adds the subtest's parameters. The test fails under the id it passes with (else
    django-11099's reproduction test read as "no test was collected")."""
    from scoring.execution.specs import parse_log

    statuses = parse_log("django/django", DJANGO_SUBTEST_LOG)
    assert statuses["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"] == "FAILED"
    assert statuses["test_help_text (auth_tests.test_validators.UsernameValidatorsTests)"] == "PASSED"
    full_311 = "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests.test_unicode_validator)"
    assert statuses[full_311] == "ERROR"


DJANGO_DOCSTRING_LOG = """test_plain (decorators.tests.MethodDecoratorTests) ... ok
test_wrapper_assignments (decorators.tests.MethodDecoratorTests)
@method_decorator preserves wrapper assignments. ... FAIL

======================================================================
FAIL: test_wrapper_assignments (decorators.tests.MethodDecoratorTests)
@method_decorator preserves wrapper assignments.
----------------------------------------------------------------------
AssertionError: None != 'method'
"""


def test_a_django_test_with_a_docstring_has_its_full_id_failing_and_passing():
    """django's verbose runner puts a docstring's first line, with the status, under the test's id;
    swebench's parser names the test by that line (django-14787's reproduction test read as
    "no test was collected"). Its full id is kept beside the parser's entry."""
    from scoring.execution.specs import parse_log

    full = "test_wrapper_assignments (decorators.tests.MethodDecoratorTests)"
    failing = parse_log("django/django", DJANGO_DOCSTRING_LOG)
    assert failing[full] == "FAILED" and failing["@method_decorator preserves wrapper assignments."] == "FAILED"
    assert failing["test_plain (decorators.tests.MethodDecoratorTests)"] == "PASSED"
    passing = parse_log("django/django", DJANGO_DOCSTRING_LOG.split("\n\n")[0].replace("... FAIL", "... ok"))
    assert passing[full] == "PASSED"


def test_an_inferred_env_reads_pytest_colour_and_pytest_ids_in_any_repository() -> None:
    """A repository's own pytest config may ask for colour (``--color=yes``); an inferred env's log
    is read by pytest's parser, also for a repository whose swebench parser is another runner's."""
    log = "\x1b[32mPASSED\x1b[0m tests/test_time.py::\x1b[1mtest_x[a]\x1b[0m\nFAILED tests/test_y.py::test_y - boom\n"
    want = {"tests/test_time.py::test_x[a]": "PASSED", "tests/test_y.py::test_y": "FAILED"}
    assert specs.parse_log("acme/humanize", log, "pytest") == want
    assert specs.parse_log("django/django", log, "pytest") == want


def test_own_runs_leave_out_sympys_cache_off_flag_and_grading_keeps_it(tmp_path: Path) -> None:
    """The Critic compares its base and patched runs with each other, so sympy's ``-C`` (its cache
    off, several times slower) is the harness's alone; the instance's own tests run as the harness does."""
    sympy = specs.repo_specs(tmp_path, "sympy/sympy", "1.1")
    harness, env = specs.test_command("sympy/sympy", sympy, "/py")
    own, own_env = specs.test_command("sympy/sympy", sympy, "/py", own=True)
    assert harness == ["/py", "bin/test", "-C", "--verbose"] and own == ["/py", "bin/test", "--verbose"]
    assert env == own_env == {"PYTHONWARNINGS": "ignore::UserWarning,ignore::SyntaxWarning"}
    django = specs.repo_specs(tmp_path, "django/django", "3.0")
    assert specs.test_command("django/django", django, "/py", own=True) == specs.test_command("django/django", django, "/py")
    # A base run cached for one kind of run is not read for the other.
    from scoring.execution.testenv import Suite
    assert Suite(targets=("t.py",)).key_parts() != Suite(targets=("t.py",), own=True).key_parts()
