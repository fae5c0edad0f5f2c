"""Crash context read from runners' text output (sympy's bin/test, plain tracebacks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scoring.runtime.crash import (
    MAX_LOG_BLOCKS,
    failures_of,
    format_records,
    from_log,
    plugin_silence,
    records_from_log,
)

ROOT = Path("/tmp/run/repo")

SYMPY_LOG = """\
test_best_origin ok
test_decompose F
test_polytope_integrate E
________________________________________________________________________________
_________ sympy/integrals/tests/test_intpoly.py:test_polytope_integrate _________
  File "/tmp/run/repo/sympy/integrals/tests/test_intpoly.py", line 70, in test_polytope_integrate
    assert polytope_integrate(Polygon(), x) == 1
  File "/tmp/run/repo/sympy/integrals/intpoly.py", line 101, in polytope_integrate
    return main_integrate(expr, facets, hp_params)
  File "/usr/lib/python3.9/site-packages/other.py", line 5, in helper
    x = 1
TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'
________________________________________________________________________________
_____________ sympy/integrals/tests/test_intpoly.py:test_decompose _____________
  File "/tmp/run/repo/sympy/integrals/tests/test_intpoly.py", line 29, in test_decompose
    assert decompose(x, True) == {x}
AssertionError

 tests finished: 1 passed, 1 failed, 1 exceptions, in 4.79 seconds
"""


def test_sympy_blocks_exceptions_first_repo_frames_only() -> None:
    text = from_log(SYMPY_LOG, ROOT, ["test_decompose", "test_polytope_integrate"])
    first, second = text.split("\n\n")
    assert first.startswith("Test sympy/integrals/tests/test_intpoly.py:test_polytope_integrate failed: "
                            "TypeError: unsupported operand")
    assert "sympy/integrals/intpoly.py:101 in polytope_integrate" in first
    assert "return main_integrate(expr, facets, hp_params)" in first
    assert "site-packages" not in first
    assert second.startswith("Test sympy/integrals/tests/test_intpoly.py:test_decompose failed: AssertionError")


def test_only_the_wanted_tests() -> None:
    text = from_log(SYMPY_LOG, ROOT, ["test_decompose"])
    assert "test_polytope_integrate" not in text and "test_decompose" in text
    assert from_log(SYMPY_LOG, ROOT, ["test_other"]) == ""


def test_plain_traceback_and_none() -> None:
    log = ("Running tests\nTraceback (most recent call last):\n"
           '  File "/tmp/run/repo/pkg/mod.py", line 3, in f\n    return a + b\n'
           "TypeError: can only concatenate str (not \"int\") to str\n")
    text = from_log(log, ROOT)
    assert text.startswith('The tests crashed: TypeError: can only concatenate str (not "int") to str')
    assert "pkg/mod.py:3 in f" in text
    assert from_log("all good\n", ROOT) == ""


def test_format_records_prefers_crashes_and_keeps_order() -> None:
    records = [
        {"nodeid": "t::a", "type": "AssertionError", "message": "assert 1 == 2", "frames": [], "locals": {}},
        {"nodeid": "t::b", "type": "KeyError", "message": "'k'",
         "frames": [{"file": "pkg/m.py", "line": 9, "function": "g", "source": "return d['k']"}],
         "locals": {"d": "{}"}},
        {"nodeid": "t::c", "type": "ValueError", "message": "x", "frames": [], "locals": {}},
    ]
    text = format_records(records, ["t::a", "t::b"])
    assert text.index("t::b") < text.index("t::a")
    assert "Locals of g when it raised:\n  d = {}" in text
    assert "t::c" not in text  # not a test the patch is judged on


def test_a_silent_crash_plugin_says_why(tmp_path: Path) -> None:
    crash_file, status_file = tmp_path / "crash.jsonl", tmp_path / "status.txt"
    failed = {"t.py::test_a": "FAILED", "t.py::test_b": "PASSED"}
    assert plugin_silence(crash_file, status_file, {"t.py::test_b": "PASSED"}) == ""  # nothing failed
    assert "did not load" in plugin_silence(crash_file, status_file, failed)
    status_file.write_text("STARTED t.py::test_a\nFAILED t.py::test_a\n")
    assert "recorded none of the 1 failing tests" in plugin_silence(crash_file, status_file, failed)
    crash_file.with_name("crash.jsonl.err").write_text("t.py::test_a: OSError: disk full\n")
    assert plugin_silence(crash_file, status_file, failed).endswith("t.py::test_a: OSError: disk full")
    crash_file.write_text('{"nodeid": "t.py::test_a", "locals": {}}\n')
    assert plugin_silence(crash_file, status_file, failed) == ""  # it recorded the failure


def test_a_frame_recorded_without_locals_says_so() -> None:
    rec = {"nodeid": "t.py::test_a", "type": "TypeError", "message": "boom", "locals": {},
           "frames": [{"file": "calc.py", "line": 3, "function": "add", "source": "return a + b"}],
           "locals_note": "no locals: add holds 2 names, f_locals dict of 0, trace off"}
    text = format_records([rec], ["t.py::test_a"])
    assert "Locals of add: none recorded (no locals: add holds 2 names, f_locals dict of 0, trace off)" in text


# django's runtests.py (unittest, --verbosity 2): a block per failing test, errors first; the
# first ERROR's traceback is a chain (sqlite3's error, then django's), the second test has a
# docstring, and the log's last traceback is the FAIL's assertion.
DJANGO_LOG = """\
test_filter (model_fields.test_jsonfield.TestQuerying) ... ERROR
test_lookup (model_fields.test_jsonfield.TestQuerying)
A lookup by key. ... ERROR
test_values (model_fields.test_jsonfield.TestQuerying) ... FAIL
test_other (model_fields.test_jsonfield.TestQuerying) ... ok

======================================================================
ERROR: test_filter (model_fields.test_jsonfield.TestQuerying)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/run/repo/django/db/backends/utils.py", line 84, in _execute
    return self.cursor.execute(sql, params)
  File "/tmp/run/repo/django/db/backends/sqlite3/base.py", line 413, in execute
    return Database.Cursor.execute(self, query, params)
sqlite3.OperationalError: no such column: JSON_TYPE

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/tmp/run/repo/tests/model_fields/test_jsonfield.py", line 590, in test_filter
    self.assertSequenceEqual(NullableJSONModel.objects.filter(value__isnull=True), [])
  File "/usr/lib/python3.8/unittest/case.py", line 1020, in assertSequenceEqual
    len1 = len(seq1)
  File "/tmp/run/repo/django/db/backends/sqlite3/base.py", line 413, in execute
    return Database.Cursor.execute(self, query, params)
django.db.utils.OperationalError: no such column: JSON_TYPE

======================================================================
ERROR: test_lookup (model_fields.test_jsonfield.TestQuerying)
A lookup by key.
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/run/repo/tests/model_fields/test_jsonfield.py", line 610, in test_lookup
    KeyTransform("a", "value").as_sql(None, None)
  File "/tmp/run/repo/django/db/models/fields/json.py", line 301, in as_sql
    return lhs + key
TypeError: unsupported operand type(s) for +: 'NoneType' and 'str'

======================================================================
FAIL: test_values (model_fields.test_jsonfield.TestQuerying)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tmp/run/repo/tests/model_fields/test_jsonfield.py", line 620, in test_values
    self.assertEqual(values, [1])
AssertionError: Lists differ: [] != [1]

----------------------------------------------------------------------
Ran 4 tests in 0.031s

FAILED (failures=1, errors=2)
"""

DJANGO_IDS = ["test_filter (model_fields.test_jsonfield.TestQuerying)",
              "test_lookup (model_fields.test_jsonfield.TestQuerying)",
              "test_values (model_fields.test_jsonfield.TestQuerying)"]


def test_django_blocks_give_a_record_per_failing_test_not_only_the_last() -> None:
    recs = records_from_log(DJANGO_LOG, ROOT)
    assert [r["nodeid"] for r in recs] == DJANGO_IDS
    assert [r["type"] for r in recs] == ["OperationalError", "TypeError", "AssertionError"]
    assert recs[0]["message"] == "no such column: JSON_TYPE"
    assert recs[0]["exc_line"].startswith("django.db.utils.OperationalError")  # the chain's last, the test's
    assert recs[0]["frames"][-1]["file"] == "django/db/backends/sqlite3/base.py"
    assert "site-packages" not in str(recs) and "unittest/case.py" not in str(recs)
    assert recs[1]["frames"][-1] == {"file": "django/db/models/fields/json.py", "line": 301,
                                     "function": "as_sql", "source": "return lhs + key"}
    assert recs[1]["doc"] == "A lookup by key."
    assert recs[2]["message"] == "Lists differ: [] != [1]"
    # only the wanted tests; a test swebench's parser names by its docstring is found by it too
    assert [r["nodeid"] for r in records_from_log(DJANGO_LOG, ROOT, DJANGO_IDS[2:])] == DJANGO_IDS[2:]
    [found] = failures_of([], DJANGO_LOG, str(ROOT), ["A lookup by key.", "test_other"])
    assert found["test"] == "A lookup by key." and found["type"] == "TypeError"


def test_django_subtests_and_python_3_11_ids_are_read_under_the_test_s_id() -> None:
    log = ("======================================================================\n"
           "ERROR: test_x (app.tests.T.test_x) (value=1)\n"
           "----------------------------------------------------------------------\n"
           "Traceback (most recent call last):\n"
           '  File "/tmp/run/repo/django/a.py", line 3, in f\n    return 1 / 0\n'
           "ZeroDivisionError: division by zero\n")
    [rec] = records_from_log(log, ROOT, ["test_x (app.tests.T.test_x)"])
    assert rec["nodeid"] == "test_x (app.tests.T.test_x)" and rec["type"] == "ZeroDivisionError"


@pytest.mark.parametrize("cut", [
    # the log ends inside the block's header, before its traceback, or inside a frame
    DJANGO_LOG[:DJANGO_LOG.index("ERROR: test_filter") + 30],
    DJANGO_LOG[:DJANGO_LOG.index("Traceback (most recent call last):")],
    DJANGO_LOG[:DJANGO_LOG.index('  File "/tmp/run/repo/django/db/backends/utils.py"') + 20],
    # a block with no traceback, one whose frames are all outside the repository, garbage
    "======================================================================\nERROR: test_x (a.T)\n"
    "----------------------------------------------------------------------\nsomething odd\n",
    "======================================================================\nERROR: test_x (a.T)\n"
    "----------------------------------------------------------------------\nTraceback (most recent call last):\n"
    '  File "/usr/lib/x.py", line 1, in f\nValueError: x\n',
    "=" * 70 + "\nFAIL: \n" + "-" * 70 + "\n" + "=" * 10_000 + "\n" + "ERROR: (" * 1000,
])
def test_a_django_block_cut_short_or_malformed_gives_no_record(cut: str) -> None:
    assert records_from_log(cut, ROOT) == []
    assert failures_of([], cut, str(ROOT), DJANGO_IDS) == []


@pytest.mark.slow
def test_many_django_blocks_are_read_in_bounded_time() -> None:
    block = DJANGO_LOG[DJANGO_LOG.index("=" * 70):DJANGO_LOG.index("-" * 70 + "\nRan")]
    recs = records_from_log(block * 2000, ROOT)
    assert len(recs) == MAX_LOG_BLOCKS


def test_a_django_label_that_no_longer_imports_explains_the_tests_never_reached() -> None:
    """The patch breaks an import of one test module: its tests go unreported, and its block
    (unittest's _FailedTest) is their error though another test's block comes last."""
    failed = ("======================================================================\n"
              "ERROR: model_fields.test_jsonfield (unittest.loader._FailedTest)\n"
              "----------------------------------------------------------------------\n"
              "ImportError: Failed to import test module: model_fields.test_jsonfield\n"
              "Traceback (most recent call last):\n"
              '  File "/tmp/run/repo/tests/model_fields/test_jsonfield.py", line 3, in <module>\n'
              "    from django.db.models.fields.json import KT\n"
              "ImportError: cannot import name 'KT' from 'django.db.models.fields.json'\n\n")
    log = failed + DJANGO_LOG[DJANGO_LOG.index("=" * 70 + "\nFAIL"):]
    recs = failures_of([], log, str(ROOT), ["test_a (model_fields.test_jsonfield.T)", DJANGO_IDS[2]],
                       unreported=["test_a (model_fields.test_jsonfield.T)"])
    assert [(r["test"], r["type"]) for r in recs] == [("test_a (model_fields.test_jsonfield.T)", "ImportError"),
                                                       (DJANGO_IDS[2], "AssertionError")]
