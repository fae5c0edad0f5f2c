"""The benchmarks' stand-in for a reproduction test: the tests the instance's test patch adds or
edits, with the file's fixtures and helpers (evaluation side only)."""

from __future__ import annotations

from eval.hidden import _created_files, keep_tests

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
