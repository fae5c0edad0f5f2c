"""Crash context read from runners' text output (sympy's bin/test, plain tracebacks)."""

from __future__ import annotations

from pathlib import Path

from scoring.runtime.crash import format_records, from_log, plugin_silence

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
