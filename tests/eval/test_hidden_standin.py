"""The benchmarks' stand-in for a reproduction test: the tests the instance's test patch adds or
edits, with the file's fixtures and helpers (evaluation side only)."""

from __future__ import annotations

import json
from pathlib import Path

from eval import hidden
from eval.fixtures.oracle import REPLIES, oracle_script
from eval.fixtures.repos import _diff, git_commit_all
from eval.hidden import _created_files, keep_tests
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import Worktree

FILE = '''import pytest


@pytest.fixture
def app():
    return object()


def helper():
    return 1


def test_old_one():
    assert helper() == 1


@pytest.mark.parametrize("x", [1, 2])
def test_new_one(x):
    assert x


class RequestsTestCase:
    def setup_method(self):
        pass

    def test_untouched(self):
        pass

    def test_edited(self):
        assert True


class TestOther:
    def test_also_untouched(self):
        pass
'''


def test_only_the_tests_the_patch_touched_are_kept_with_fixtures_and_helpers():
    lines = FILE.splitlines()
    changed = {lines.index("def test_new_one(x):") + 1, lines.index("        assert True") + 1}
    kept = keep_tests(FILE, changed)
    assert "def test_new_one" in kept and '@pytest.mark.parametrize("x", [1, 2])' in kept
    assert "def test_edited" in kept and "def setup_method" in kept and "class RequestsTestCase" in kept
    assert "def app()" in kept and "def helper()" in kept
    assert "test_old_one" not in kept and "test_untouched" not in kept and "TestOther" not in kept
    compile(kept, "kept.py", "exec")


MIXIN = '''import unittest


class SessionTestsMixin:
    def test_untouched(self):
        pass

    def test_edited(self):
        assert True


class DatabaseSessionTests(SessionTestsMixin, unittest.TestCase):
    backend = "db"

    def test_db_only(self):
        pass


class TimeZoneTests(DatabaseSessionTests):
    def test_tz_only(self):
        pass


class Unrelated(unittest.TestCase):
    def test_other(self):
        pass


class EmptyLabelTests(unittest.TestCase):
    widget = None

    def test_label(self):
        pass


class Jinja2EmptyLabelTests(EmptyLabelTests):
    renderer = "jinja2"
'''


def test_a_mixins_edited_test_keeps_the_classes_that_run_it():
    lines = MIXIN.splitlines()
    kept = keep_tests(MIXIN, {lines.index("        assert True") + 1})
    assert "def test_edited" in kept and "test_untouched" not in kept
    # the concrete test cases stay (they run the mixin's test), without tests of their own...
    assert "class DatabaseSessionTests(SessionTestsMixin, unittest.TestCase)" in kept and "test_db_only" not in kept
    # ...unless nothing else is in the class body, which would not parse without them
    assert "class TimeZoneTests(DatabaseSessionTests)" in kept and "test_tz_only" in kept
    assert "Unrelated" not in kept
    # a class that stays (no tests of its own to drop) keeps its base (django-16229's NameError)
    assert "class EmptyLabelTests(unittest.TestCase)" in kept and "class Jinja2EmptyLabelTests" in kept
    assert "def test_label" not in kept
    exec(compile(kept, "kept.py", "exec"), {})


def test_a_patch_that_touches_no_test_keeps_the_whole_file():
    assert keep_tests(FILE, {1}) == FILE
    assert keep_tests("def test_x(:\n", {1}) == "def test_x(:\n"


def test_files_the_test_patch_creates_are_the_data_files():
    patch = ("diff --git a/tests/static/config.toml b/tests/static/config.toml\nnew file mode 100644\n"
             "--- /dev/null\n+++ b/tests/static/config.toml\n@@ -0,0 +1,2 @@\n+TEST_KEY=\"foo\"\n+SECRET_KEY=\"bar\"\n"
             "diff --git a/tests/test_config.py b/tests/test_config.py\n--- a/tests/test_config.py\n"
             "+++ b/tests/test_config.py\n@@ -1,1 +1,2 @@\n import os\n+import sys\n")
    assert _created_files(patch) == {"tests/static/config.toml": 'TEST_KEY="foo"\nSECRET_KEY="bar"\n'}


def _command_repo(tmp_path: Path) -> tuple[Worktree, str]:
    repo = tmp_path / "repo"
    (repo / "tests" / "user_commands" / "management" / "commands").mkdir(parents=True)
    (repo / "tests" / "user_commands" / "management" / "commands" / "__init__.py").write_text("")
    (repo / "tests" / "user_commands" / "tests.py").write_text(COMMAND_TESTS)
    (repo / "tests" / "test_self.py").write_text(COMMAND_TESTS)
    base = git_commit_all(repo, "base")
    return Worktree(repo, base), base


COMMAND_TESTS = "from django.test import SimpleTestCase\n\n\nclass CommandTests(SimpleTestCase):\n" \
                "    def test_old(self):\n        pass\n"
NEW_TEST = "\n    def test_outputwrapper_flush(self):\n        call_command('outputwrapper')\n"
COMMAND = "from django.core.management.base import BaseCommand\n\n\nclass Command(BaseCommand):\n" \
          "    def handle(self, **options):\n        self.stdout.write('OK')\n"


def _instance(base: str, test_patch: str, fail_to_pass: list[str]) -> Instance:
    return Instance.model_validate({
        "instance_id": "fixture__cmd-1", "repo": "fixture/cmd", "base_commit": base, "problem_statement": "p",
        "version": "0.1", "patch": "", "test_patch": test_patch, "FAIL_TO_PASS": json.dumps(fail_to_pass),
        "PASS_TO_PASS": "[]"})


def test_the_draft_is_a_test_file_and_a_module_it_needs_comes_as_its_data_file(tmp_path: Path):
    # The created command's stem is in the FAIL_TO_PASS test's name: it is still no test file.
    wt, base = _command_repo(tmp_path)
    command = "tests/user_commands/management/commands/outputwrapper.py"
    created = "".join("+" + line for line in COMMAND.splitlines(keepends=True))
    patch = (f"diff --git a/{command} b/{command}\nnew file mode 100644\n--- /dev/null\n+++ b/{command}\n"
             f"@@ -0,0 +1,{len(COMMAND.splitlines())} @@\n{created}"
             + _diff(COMMAND_TESTS, COMMAND_TESTS + NEW_TEST, "tests/user_commands/tests.py"))
    inst = _instance(base, patch, ["test_outputwrapper_flush (user_commands.tests.CommandTests)"])
    drafts = hidden.test_files_from_test_patch(inst, wt)
    assert [d["path"] for d in drafts] == ["tests/user_commands/tests.py"], drafts
    assert drafts[0]["files"] == [{"path": command, "content": COMMAND}]
    assert "def test_outputwrapper_flush" in drafts[0]["content"] and "def test_old" not in drafts[0]["content"]
    assert hidden.test_file_from_test_patch(inst, wt) == drafts[0]
    # The file the base has comes again as a new file beside it; the command never is a draft.
    assert hidden.standin_drafts(inst, wt) == [drafts[0], drafts[0] | {"path": "tests/user_commands/test_reproduction.py"}]


def test_each_test_file_is_a_draft_and_the_stand_in_drafts_them_in_turn(tmp_path: Path):
    wt, base = _command_repo(tmp_path)
    patch = (_diff(COMMAND_TESTS, COMMAND_TESTS + NEW_TEST, "tests/user_commands/tests.py")
             + _diff(COMMAND_TESTS, COMMAND_TESTS + NEW_TEST, "tests/test_self.py"))
    inst = _instance(base, patch, ["tests/test_self.py::CommandTests::test_outputwrapper_flush",
                                   "tests/test_self.py::CommandTests::test_old"])
    drafts = hidden.test_files_from_test_patch(inst, wt)
    # The file holding more FAIL_TO_PASS tests first, though the patch lists it second.
    assert [d["path"] for d in drafts] == ["tests/test_self.py", "tests/user_commands/tests.py"]
    assert drafts[0]["other_files"] == ["tests/user_commands/tests.py"]
    replies = oracle_script(inst, drafts)["ReproTestDraft"]
    assert [r["path"] for r in replies[:3]] == ["tests/test_self.py", "tests/user_commands/tests.py",
                                                "tests/test_self.py"]
    assert len(replies) == REPLIES
    one = oracle_script(inst, drafts[0])["ReproTestDraft"]
    assert {r["path"] for r in one} == {"tests/test_self.py"} and len(one) == REPLIES
    assert oracle_script(inst)["ReproTestDraft"][0]["path"] == "tests/test_oracle_missing.py"
    # Then each file the base has, again as a new file beside it (a name the base does not hold).
    (Path(wt.path) / "tests" / "test_reproduction.py").write_text("")
    git_commit_all(Path(wt.path), "a taken name")
    inst = _instance(wt.repo.head.commit.hexsha, patch, inst.FAIL_TO_PASS)
    again = hidden.standin_drafts(inst, wt)
    assert [d["path"] for d in again] == ["tests/test_self.py", "tests/user_commands/tests.py",
                                          "tests/test_reproduction2.py", "tests/user_commands/test_reproduction.py"]
    assert again[2]["content"] == drafts[0]["content"] and again[3]["content"] == drafts[1]["content"]
