"""Runtime evidence from the loop's own test runs: a selected existing test that crashes in the
patched code makes the patch Unsafe (source ``runtime``, with the place that raised); a broken
assertion stays a regression; a flaky test is run twice at the base and left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.repos import BUGGY_LINE, FIXED_LINE, calc_script
from fixgraph.config import RegressionSettings, RunConfig
from fixgraph.dataset import Instance, Task
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import RepoCache
from scoring.execution.outcomes import own_outcome
from scoring.execution.runner import make_runner
from scoring.runtime.crash import failures_of
from scoring.runtime.findings import SCOPES, crash_summaries, crashed_tests, runtime_findings
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks
from tests.helpers.testrun_helpers import REPO, apply_to, diff_for, git, local_settings, make_repo

CALC = '''\
def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def scale(values, factor):
    return [mul(v, factor) for v in values]


def label(x):
    return "n=%d" % x
'''

TESTS = '''\
import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_scale():
    assert calc.scale([1, 2], 3) == [3, 6]
'''

LABEL_TESTS = '''\
import calc


def test_label():
    assert calc.label(4) == "n=4"
'''


def _judge(tmp_path: Path, new_calc: str, files: dict[str, str] | None = None, base_runs: int = 1,
           base: str = CALC, **settings: Any):
    mirrors, commit = make_repo(tmp_path, {"calc.py": base, "tests/test_calc.py": TESTS, **(files or {})})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", base, new_calc))
    runner = make_runner(local_settings(), tmp_path / "cache")
    outcome = own_outcome(runner, task, wt, patch, [], RegressionSettings(base_runs=base_runs, **settings))
    return outcome, patch


@pytest.mark.slow
def test_a_type_error_in_the_patched_code_is_an_unsafe_runtime_finding_with_its_frame(tmp_path: Path) -> None:
    broken = CALC.replace("    return [mul(v, factor) for v in values]\n",
                          "    return [mul(v, factor) for v in values] + factor\n")
    outcome, patch = _judge(tmp_path, broken)
    assert outcome.regression_ran and outcome.pass_to_pass_after["tests/test_calc.py::test_scale"] == "FAILED"
    [found] = runtime_findings(outcome, patch)
    finding: dict[str, Any] = dict(found)
    assert finding["source"] == "runtime" and finding["rule"] == "TypeError"
    assert (finding["file"], finding["line"], finding["symbol"]) == ("calc.py", 10, "scale")
    assert finding["code"] == "return [mul(v, factor) for v in values] + factor"
    assert "can only concatenate list" in finding["message"] and "tests/test_calc.py::test_scale" in finding["message"]
    assert crashed_tests(outcome, patch) == {"tests/test_calc.py::test_scale"}


@pytest.mark.slow
def test_a_finding_names_the_repository_s_paths_not_the_run_s_copy(tmp_path: Path) -> None:
    broken = CALC.replace("    return [mul(v, factor) for v in values]\n",
                          "    raise ValueError('scale is broken in ' + __file__)\n")
    outcome, patch = _judge(tmp_path, broken)
    [found] = runtime_findings(outcome, patch)
    assert "scale is broken in ./calc.py" in dict(found)["message"]
    assert all(str(rec["message"]).count("/") <= 1 for rec in outcome.regression_crashes)


@pytest.mark.slow
def test_a_module_that_no_longer_imports_is_a_runtime_finding_where_it_raised(tmp_path: Path) -> None:
    """pytest reports a test module that fails to import as its own CollectError; the finding
    names the exception under it, in the patched module."""
    outcome, patch = _judge(tmp_path, CALC.replace("def label(x):", "LIMIT = max_limit()\n\n\ndef label(x):"))
    assert set(outcome.pass_to_pass_after.values()) == {"MISSING"}
    [found] = runtime_findings(outcome, patch)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["symbol"]) == ("NameError", "calc.py", "<module>")
    assert finding["code"] == "LIMIT = max_limit()" and "(and 1 more tests)" in finding["message"]


@pytest.mark.slow
def test_a_broken_assertion_is_a_regression_not_a_runtime_error(tmp_path: Path) -> None:
    outcome, patch = _judge(tmp_path, CALC.replace("return a + b", "return a + b + 1"))
    assert outcome.pass_to_pass_before["tests/test_calc.py::test_add"] == "PASSED"
    assert outcome.pass_to_pass_after["tests/test_calc.py::test_add"] == "FAILED"
    assert [r["type"] for r in outcome.regression_crashes] == ["AssertionError"]
    assert runtime_findings(outcome, patch) == [] and crashed_tests(outcome, patch) == set()


@pytest.mark.slow
def test_a_crash_only_in_test_code_stays_a_regression_in_both_scopes(tmp_path: Path) -> None:
    """A renamed function: the test raises AttributeError in its own frame, in no source file, so
    it is not evidence of an error in the library's code (it is still a regression)."""
    outcome, patch = _judge(tmp_path, CALC.replace("def label(x):", "def label_of(x):"),
                            files={"tests/test_label.py": LABEL_TESTS})
    assert outcome.pass_to_pass_after["tests/test_label.py::test_label"] == "FAILED"
    [rec] = outcome.regression_crashes
    assert rec["type"] == "AttributeError" and [f["file"] for f in rec["frames"]] == ["tests/test_label.py"]
    [summary] = crash_summaries(outcome, patch)
    assert summary["in_test"] and summary["frame"] is None and summary["touched"] is None
    for scope in SCOPES:
        assert runtime_findings(outcome, patch, scope) == [] and crashed_tests(outcome, patch, scope) == set()


# An untouched caller of calc.count, and an untouched helper that calc.label may call.
REPORT = '''\
import calc


def summary(values):
    return "%d items" % calc.count(values)
'''
FMT = '''\
def pad(text, width):
    return text.ljust(width)
'''
CALLER_TESTS = TESTS + '''

import report


def test_summary():
    assert report.summary([1, 2]) == "2 items"
'''
WITH_COUNT = CALC + "\n\ndef count(values):\n    return len(values)\n"


@pytest.mark.slow
def test_a_helper_s_new_return_type_crashing_its_untouched_caller_is_unsafe_only_in_scope_source(
        tmp_path: Path) -> None:
    """count() now returns a str: the untouched report.summary raises TypeError in test_summary.
    No frame is in the touched calc.py (count returned normally), so under ``touched`` it is only a
    regression; under ``source`` it is a runtime finding at the caller's frame."""
    changed = WITH_COUNT.replace("    return len(values)\n", "    return str(len(values))\n")
    outcome, patch = _judge(tmp_path, changed, files={"report.py": REPORT, "tests/test_calc.py": CALLER_TESTS},
                            base=WITH_COUNT)
    test = "tests/test_calc.py::test_summary"
    assert outcome.pass_to_pass_before[test] == "PASSED" and outcome.pass_to_pass_after[test] == "FAILED"
    [summary] = crash_summaries(outcome, patch)
    assert summary["type"] == "TypeError" and not summary["in_test"] and summary["touched"] is None
    assert runtime_findings(outcome, patch, "touched") == [] and crashed_tests(outcome, patch, "touched") == set()
    [found] = runtime_findings(outcome, patch, "source")
    finding: dict[str, Any] = dict(found)
    assert (finding["source"], finding["rule"]) == ("runtime", "TypeError")
    assert (finding["file"], finding["line"], finding["symbol"]) == ("report.py", 5, "summary")
    assert finding["code"] == 'return "%d items" % calc.count(values)'
    assert "a real number is required" in finding["message"] and test in finding["message"]
    assert "passed through the patched" not in finding["message"]
    assert crashed_tests(outcome, patch, "source") == {test}


@pytest.mark.slow
def test_in_scope_source_a_crash_past_the_patched_frame_names_both_frames(tmp_path: Path) -> None:
    """label() now calls the untouched fmt.pad with a str width: the TypeError is raised in fmt.py,
    through the touched calc.py. ``touched`` reports the touched frame (as before); ``source`` the
    innermost one, and the touched frame it passed through, with its line (REDO §G)."""
    changed = "import fmt\n\n\n" + CALC.replace('    return "n=%d" % x', '    return fmt.pad("n=%d" % x, "8")')
    outcome, patch = _judge(tmp_path, changed, files={"fmt.py": FMT, "tests/test_label.py": LABEL_TESTS})
    [touched] = [dict(f) for f in runtime_findings(outcome, patch, "touched")]
    assert (touched["rule"], touched["file"], touched["symbol"]) == ("TypeError", "calc.py", "label")
    [source] = [dict(f) for f in runtime_findings(outcome, patch, "source")]
    assert (source["rule"], source["file"], source["line"], source["symbol"]) == ("TypeError", "fmt.py", 2, "pad")
    assert source["code"] == "return text.ljust(width)"
    assert (f"passed through the patched calc.py:{touched['line']} in label: "
            'return fmt.pad("n=%d" % x, "8")') in source["message"]


@pytest.mark.slow
def test_a_crash_in_a_test_folder_s_helper_stays_a_regression_in_both_scopes(tmp_path: Path) -> None:
    """add() now returns a str and the test's own helper (tests/helpers.py, test code) raises on
    it: the innermost repository frame is test code, so neither scope calls it a runtime error."""
    helpers = "def plus_one(x):\n    return x + 1\n"
    tests = "import calc\nfrom helpers import plus_one\n\n\ndef test_add():\n    assert plus_one(calc.add(2, 3)) == 6\n"
    outcome, patch = _judge(tmp_path, CALC.replace("    return a + b\n", "    return str(a + b)\n"),
                            files={"tests/helpers.py": helpers, "tests/test_calc.py": tests})
    assert outcome.pass_to_pass_after["tests/test_calc.py::test_add"] == "FAILED"
    [summary] = crash_summaries(outcome, patch)
    assert summary["type"] == "TypeError" and summary["in_test"] and summary["frame"] is None
    for scope in SCOPES:
        assert runtime_findings(outcome, patch, scope) == []


@pytest.mark.slow
def test_a_change_no_selected_test_notices_stays_clean(tmp_path: Path) -> None:
    outcome, patch = _judge(tmp_path, CALC.replace("def label(x):", "def label(x):  # formats x"))
    assert outcome.regression_ran and outcome.pass_to_pass_before
    assert all(s == "PASSED" for s in outcome.pass_to_pass_after.values())
    assert outcome.regression_crashes == [] and runtime_findings(outcome, patch) == []


@pytest.mark.slow
def test_a_test_that_flips_between_base_runs_is_left_out_and_recorded(tmp_path: Path, monkeypatch) -> None:
    """A test whose outcome changes from one run to the next. The sandbox keeps no state between
    runs (by design), so the flip is made at the runner's boundary: every other base run reports it
    failed, and so does the patched run (which may run beside the first base run, in either order)."""
    from scoring.execution.runner import SubprocessRunner

    real = SubprocessRunner.run_suite
    calls = {"n": 0}

    def flipping(self, task, wt, patch, suite):  # noqa: ANN001
        run = real(self, task, wt, patch, suite)
        tid = "tests/test_flaky.py::test_flips"
        if tid in run.statuses:
            if patch is None:
                calls["n"] += 1
            run.statuses[tid] = "PASSED" if patch is None and calls["n"] % 2 else "FAILED"
        return run

    monkeypatch.setattr(SubprocessRunner, "run_suite", flipping)
    flaky = "import calc\n\n\ndef test_flips():\n    assert calc.add(0, 0) == 0\n"
    change = CALC.replace("def label(x):", "def label(x):  # formats x")
    # Run once at the base, and not confirmed: it passes there, fails with the patch, and looks
    # like a regression.
    once, _ = _judge(tmp_path / "once", change, files={"tests/test_flaky.py": flaky}, confirm_runs=0)
    assert once.pass_to_pass_after["tests/test_flaky.py::test_flips"] == "FAILED"
    calls["n"] = 0
    # Confirmed (the default): the base runs again, the test fails there, so it is no regression.
    confirmed, _ = _judge(tmp_path / "confirmed", change, files={"tests/test_flaky.py": flaky})
    assert "tests/test_flaky.py::test_flips" not in confirmed.pass_to_pass_before
    assert any("flaky (not every run again agreed), left out: tests/test_flaky.py::test_flips" in n
               for n in confirmed.notes)
    assert confirmed.pass_to_pass_before and not confirmed.broken()
    calls["n"] = 0
    # Run twice at the base: it differs, so it is left out and named.
    twice, _ = _judge(tmp_path / "twice", change, files={"tests/test_flaky.py": flaky}, base_runs=2)
    assert "tests/test_flaky.py::test_flips" not in twice.pass_to_pass_before
    assert any("flaky at the base, left out: tests/test_flaky.py::test_flips" in n for n in twice.notes)
    assert twice.pass_to_pass_before and all(s == "PASSED" for s in twice.pass_to_pass_after.values())


@pytest.mark.slow
def test_a_base_run_cut_by_its_timeout_runs_once_and_prices_its_files_for_the_next_task(tmp_path: Path) -> None:
    """sympy's rubi tests took the 300 s timeout twice per task, and again on every task: nothing
    was learnt from a cut run. Now it is not repeated, and the files it did not finish carry the
    timeout in the cost book, so the next selection leaves them out."""
    from scoring.execution.choose_tests import CostBook, select_tests

    slow = "import time\nimport calc\n\n\ndef test_slow_scale():\n    time.sleep(60)\n    assert calc.scale\n"
    change = CALC.replace('return "n=%d" % x', 'return "n=%d!" % x')
    outcome, patch = _judge(tmp_path, change, files={"tests/test_slow.py": slow}, base_runs=2, timeout_s=4)
    assert not outcome.regression_ran or outcome.timed_out
    assert any("cut by its timeout: run once" in n for n in outcome.notes), outcome.notes
    book = CostBook(tmp_path / "cache", REPO, "").book
    # the file the run finished before it was cut is not charged: the timeout is the slow file's
    assert book["tests/test_slow.py"] == {"s": 4.0, "n": 0} and "tests/test_calc.py" not in book
    commit = git(tmp_path / "mirrors" / REPO.replace("/", "+"), "rev-parse", "HEAD")
    wt = RepoCache(tmp_path / "cache", tmp_path / "mirrors").worktree(REPO, commit, "again")
    again = select_tests(wt, patch, RegressionSettings(max_expected_s=1.0), costs=CostBook(tmp_path / "cache", REPO, ""))
    assert len(again.files) == 1  # the best-ranked file still runs; the other is priced out
    assert any("tests/test_slow.py" in why and "measured 4s, over regression.max_expected_s" in why
               for why in again.left_out), again.left_out


@pytest.mark.slow
def test_tests_a_patched_run_cut_by_its_timeout_did_not_reach_are_not_broken(tmp_path: Path) -> None:
    """The patch makes the first test hang: the patched run is killed and reports nothing, and
    the tests it never reached are left out (unknown), not counted as regressions."""
    base = CALC + "\n\ndef wait():\n    return None\n"
    tests = "import calc\n\n\ndef test_wait():\n    calc.wait()\n\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
    mirrors, commit = make_repo(tmp_path, {"calc.py": base, "tests/test_calc.py": tests})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", base, base.replace(
        "def wait():\n    return None", "def wait():\n    import time\n    time.sleep(120)")))
    outcome = own_outcome(make_runner(local_settings(), tmp_path / "cache"), task, wt, patch, [],
                          RegressionSettings(timeout_s=10))
    assert outcome.timed_out and outcome.regression_ran
    assert not [t for t, st in outcome.pass_to_pass_after.items() if st != "PASSED"], outcome.pass_to_pass_after


@pytest.mark.slow
def test_on_a_busy_machine_the_selection_s_timeout_stretches_with_the_load(tmp_path: Path, monkeypatch) -> None:
    """A test that takes 6 s runs out a 4 s timeout on an idle machine; at several processes per
    core it takes longer for the same work, and the timeout grows with it (five per core: 20 s)."""
    from scoring.execution import testenv

    slow = "import time\nimport calc\n\n\ndef test_slow():\n    time.sleep(6)\n    assert calc.add(1, 1) == 2\n"
    change = CALC.replace('return "n=%d" % x', 'return "n=%d!" % x')
    idle, _ = _judge(tmp_path / "idle", change, files={"tests/test_calc.py": slow}, timeout_s=4)
    assert not idle.regression_ran and "timed out" in idle.reason
    monkeypatch.setattr(testenv, "slowdown", lambda: 5.0)
    busy, _ = _judge(tmp_path / "busy", change, files={"tests/test_calc.py": slow}, timeout_s=4)
    assert busy.regression_ran and busy.pass_to_pass_after == {"tests/test_calc.py::test_slow": "PASSED"}


def test_a_suite_s_timeout_stretches_with_the_load_never_past_the_backend_s_cap() -> None:
    from scoring.execution.testenv import Suite, suite_timeout

    own = Suite(targets=("tests/test_calc.py",), timeout_s=30)
    assert [suite_timeout(own, 600, slowed) for slowed in (1.0, 4.0, 40.0)] == [30, 120, 600]
    # A suite with no timeout of its own (the hidden tests) has the backend's, as the harness does.
    assert suite_timeout(Suite(targets=("tests/test_calc.py",)), 600, 4.0) == 600


def test_failures_read_from_a_non_pytest_log_name_the_test() -> None:
    log = ("test_scale E\n"
           "________________________________________________________________________________\n"
           "_____________ sympy/core/tests/test_calc.py:test_scale _____________\n"
           '  File "/tmp/run/repo/sympy/core/tests/test_calc.py", line 5, in test_scale\n'
           "    assert scale([1], 2) == [2]\n"
           '  File "/tmp/run/repo/sympy/core/calc.py", line 10, in scale\n'
           "    return [mul(v, factor) for v in values] + factor\n"
           "TypeError: can only concatenate list (not \"int\") to list\n")
    [rec] = failures_of([], log, "/tmp/run/repo", ["test_scale", "test_other"])
    assert rec["test"] == "test_scale" and rec["type"] == "TypeError"
    assert rec["frames"][-1] == {"file": "sympy/core/calc.py", "line": 10, "function": "scale",
                                 "source": "return [mul(v, factor) for v in values] + factor"}


# sympy's bin/test when the patched package no longer imports (sympy-14308's patch, run here):
# the runner dies before any test, so no failure block names a test.
RUNNER_DIED = """\
Traceback (most recent call last):
  File "/tmp/run/repo/bin/test", line 105, in <module>
    import sympy
  File "/tmp/run/repo/sympy/__init__.py", line 60, in <module>
    from .polys import *
  File "/tmp/run/repo/sympy/printing/pretty/pretty.py", line 2292, in <module>
    from sympy.vector import CoordSys3D
  File "/tmp/run/repo/sympy/vector/vector.py", line 5, in <module>
    from sympy import sqrt, ImmutableMatrix as Matrix, Add
ImportError: cannot import name 'sqrt' from partially initialized module 'sympy' (most likely due to a circular import)
"""

PRETTY_PATCH = ("diff --git a/sympy/printing/pretty/pretty.py b/sympy/printing/pretty/pretty.py\n"
                "--- a/sympy/printing/pretty/pretty.py\n"
                "+++ b/sympy/printing/pretty/pretty.py\n"
                "@@ -2289,3 +2289,5 @@ def _print_Quantity(self, e):\n"
                "             return self.emptyPrinter(e)\n"
                " \n"
                " \n"
                "+from sympy.vector import CoordSys3D\n"
                "+\n")


@pytest.mark.slow
def test_a_patched_package_that_breaks_a_conftest_import_is_a_runtime_error_where_it_raised(tmp_path: Path) -> None:
    """The repository's conftest.py imports the package (astropy's, sphinx's do): when the patch
    makes it raise at import, pytest runs no test and prints a short traceback under "ImportError
    while loading conftest"; every selected test that passed at the base is explained by it."""
    broken = CALC.replace("def label(x):", "LIMIT = max_limit()\n\n\ndef label(x):")
    outcome, patch = _judge(tmp_path, broken, files={"conftest.py": "import calc\n"})
    assert outcome.pass_to_pass_before and set(outcome.pass_to_pass_after.values()) == {"MISSING"}
    [found] = runtime_findings(outcome, patch)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["symbol"]) == ("NameError", "calc.py", "<module>")
    assert finding["code"] == "LIMIT = max_limit()" and "max_limit" in finding["message"]


def test_a_runner_that_dies_before_any_test_explains_the_tests_it_never_reached() -> None:
    """The patched package no longer imports: every selected test that passed at the base goes
    unreported, and the runner's own traceback, through a patched frame, is their runtime error.
    A test the run did report (here: failed on its own) is not explained by it."""
    from scoring.execution.outcomes import TestOutcome

    wanted = ["test_pretty_basic", "test_upretty_greek", "test_reported"]
    recs = failures_of([], RUNNER_DIED, "/tmp/run/repo", wanted, unreported=wanted[:2])
    assert [r["test"] for r in recs] == wanted[:2] and {r["type"] for r in recs} == {"ImportError"}
    assert failures_of([], RUNNER_DIED, "/tmp/run/repo", wanted) == []  # nothing unreported: no attribution
    outcome = TestOutcome(runnable=True, reason="", source="own", regression_crashes=recs)
    [found] = runtime_findings(outcome, PRETTY_PATCH)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["line"]) == ("ImportError", "sympy/printing/pretty/pretty.py", 2292)
    assert "circular import" in finding["message"] and "(and 1 more tests)" in finding["message"]


def _fix_mean_and_change_add(mirrors: Path, inst: Instance, cfg: RunConfig,
                             new_add: str) -> tuple[ScriptedChatModel, list[dict[str, Any]]]:
    """A graph run whose first attempt fixes mean() and rewrites add()'s body as ``new_add`` (in a
    way static analysis cannot see: untyped parameters), then fixes mean() alone; its attempts."""
    script = calc_script(first_attempt_broken=False)
    script["CodeChange"].insert(0, {"edits": [
        {"path": "calc/ops.py", "search": BUGGY_LINE, "replace": FIXED_LINE},
        {"path": "calc/ops.py", "search": "    return a + b\n", "replace": new_add}],
        "explanation": "Fix mean; change add."})
    model = ScriptedChatModel(script=script)
    run_tasks([inst], cfg, run_id="rt", repos=mirrors, model_factory=lambda role: model, progress=False)
    return model, read_record(cfg, "rt", inst.instance_id)["attempts"]


@pytest.mark.slow
def test_the_critic_rejects_a_patch_whose_existing_test_crashes_and_the_coder_gets_the_place(
        tmp_path: Path, calc, cfg_factory) -> None:
    """End to end: attempt 1 fixes mean() but breaks add() in a way static analysis cannot see
    (untyped parameters); the selected existing test_add raises TypeError there; the Critic says
    Unsafe with the frame, and the Coder's next prompt has it."""
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model, (first, second) = _fix_mean_and_change_add(mirrors, inst, cfg, "    return a + str(b)\n")
    assert first["verdict"] == "Unsafe"
    [finding] = [f for f in first["findings"] if f["source"] == "runtime"]
    assert (finding["rule"], finding["file"], finding["symbol"]) == ("TypeError", "calc/ops.py", "add")
    assert finding["code"] == "return a + str(b)"
    # Not reported twice: the crashed test is not also a plain regression finding.
    assert not [f for f in first["findings"] if f.get("rule") == "regression" and "test_add" in f["message"]]
    retry = model.prompts_for("CodeChange")[1]
    assert f"calc/ops.py:{finding['line']} in add" in retry and "at: return a + str(b)" in retry
    assert second["verdict"] == "Safe" and not [f for f in second["findings"] if f["source"] == "runtime"]


@pytest.mark.slow
def test_a_selected_file_that_cannot_run_at_the_base_does_not_silence_the_others(tmp_path: Path) -> None:
    """A selected test module that does not import at the base stops the whole run (pytest's
    collection error; sympy's bin/test crashes): each file then runs alone at the base, the dead one
    is left out with the reason, and the others still judge the patch."""
    dead = "import calc\nimport no_such_module\n\n\ndef test_dead():\n    assert calc.add(1, 1) == 2\n"
    broken = CALC.replace("    return a + b\n", "    return a - b\n")
    outcome, _ = _judge(tmp_path, broken, {"tests/test_dead.py": dead})
    assert outcome.regression_ran and outcome.selection["files"] == ["tests/test_calc.py"]
    assert any(x.startswith("tests/test_dead.py: nothing passes at the base, run alone")
               for x in outcome.selection["left_out"])
    assert outcome.pass_to_pass_after["tests/test_calc.py::test_add"] == "FAILED"


@pytest.mark.slow
def test_a_slow_file_still_gives_the_tests_that_name_the_changed_code(tmp_path: Path) -> None:
    """A file measured too slow to run whole is left out, but its tests that name the changed
    function run alone (by node id) and catch the regression; its other tests do not run."""
    from scoring.execution.choose_tests import CostBook

    others = "".join(f"def test_other_{i}():\n    assert calc.add({i}, 0) == {i}\n\n\n" for i in range(30))
    slow = "import calc\n\n\n" + others + "class TestFormats:\n    def test_label(self):\n        assert calc.label(3) == 'n=3'\n"
    # A module skipped at import: pytest would find none of its tests, and run nothing at all.
    skipped = "import pytest\n\npytest.importorskip('no_such_module')\n\n\ndef test_label_too():\n    assert calc.label(1)\n"
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS, "tests/test_slow.py": slow,
                                           "tests/test_skipped.py": skipped})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    book = CostBook(tmp_path / "cache", REPO, "")
    book.record(wt, ["tests/test_slow.py"], {f"tests/test_slow.py::test_other_{i}": "PASSED" for i in range(31)}, 60.0)
    book.record(wt, ["tests/test_skipped.py"], {"tests/test_skipped.py::test_label_too": "PASSED"}, 5.0)
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace('"n=%d" % x', '"n = %d" % x')))
    runner = make_runner(local_settings(), tmp_path / "cache")
    outcome = own_outcome(runner, task, wt, patch, [], RegressionSettings(max_files=1))
    assert outcome.selection["files"] == ["tests/test_calc.py"]
    assert outcome.selection["tests"] == ["tests/test_slow.py::TestFormats::test_label"]
    assert "tests/test_skipped.py::test_label_too: pytest does not find it at the base (its module is skipped?)" \
        in outcome.selection["left_out"]
    assert outcome.pass_to_pass_after["tests/test_slow.py::TestFormats::test_label"] == "FAILED"
    assert not any(t.startswith("tests/test_slow.py::test_other") for t in outcome.pass_to_pass_before)
    assert any("1 of its 1 tests that name changed code run alone" in x for x in outcome.selection["left_out"])


PYTEST_LONG_REPORT = """\
=================================== FAILURES ===================================
_________________________________ test_classes _________________________________

app = <SphinxTestApp buildername='html'>

    @pytest.mark.sphinx('html', testroot='ext-autodoc')
    def test_classes(app):
>       actual = do_autodoc(app, 'function', 'target.classes.Foo')

tests/test_ext_autodoc_autoclass.py:51:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
tests/test_ext_autodoc.py:39: in do_autodoc
    documenter.generate()
sphinx/ext/autodoc/__init__.py:900: in generate
    self.document_members(all_members)
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

self = <sphinx.ext.autodoc.ClassDocumenter object at 0x7f>

    def add_content(self, more_content, no_docstring=False):
        if True:
>                   for i, line in enumerate(self.process_doc(docstrings)):
E                   UnboundLocalError: local variable 'docstrings' referenced before assignment

sphinx/ext/autodoc/__init__.py:616: UnboundLocalError
_____________________________ TestX.test_y[a.b] ______________________________

    def test_y():
>       assert 1 == 2
E       assert 1 == 2

tests/test_x.py:3: AssertionError
=============================== warnings summary ===============================
"""


def test_without_the_plugin_pytest_s_long_report_gives_the_frames(tmp_path: Path) -> None:
    """tox passes the test process neither PYTHONPATH nor the plugin's variables (sphinx): the
    runtime finding comes from pytest's own report, with the place that raised."""
    from scoring.execution.outcomes import TestOutcome

    ids = ["tests/test_ext_autodoc_autoclass.py::test_classes", "tests/test_x.py::TestX::test_y[a.b]"]
    crashes = failures_of([], PYTEST_LONG_REPORT, str(tmp_path), ids)
    assert [(c["test"], c["type"]) for c in crashes] == [(ids[0], "UnboundLocalError"), (ids[1], "AssertionError")]
    assert [f["function"] for f in crashes[0]["frames"]] == ["test_classes", "do_autodoc", "generate", "add_content"]
    patch = ("diff --git a/sphinx/ext/autodoc/__init__.py b/sphinx/ext/autodoc/__init__.py\n"
             "--- a/sphinx/ext/autodoc/__init__.py\n+++ b/sphinx/ext/autodoc/__init__.py\n@@ -1 +1 @@\n-a\n+b\n")
    outcome = TestOutcome(runnable=True, reason="", regression_crashes=crashes)
    [found] = runtime_findings(outcome, patch)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["line"], finding["symbol"]) == (
        "UnboundLocalError", "sphinx/ext/autodoc/__init__.py", 616, "add_content")
    assert finding["code"] == "for i, line in enumerate(self.process_doc(docstrings)):"


@pytest.mark.slow
def test_a_base_run_that_reports_no_test_is_not_cached(tmp_path: Path) -> None:
    """Nothing reported at all may be the environment's passing trouble (caught mid-reinstall):
    it is run again next time rather than pinned."""
    from scoring.execution.outcomes import baseline
    from scoring.execution.testenv import Suite

    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS,
                                           "tests/test_empty.py": "import calc\n"})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    runner = make_runner(local_settings(), tmp_path / "cache")
    cached = tmp_path / "cache" / "test-baselines"
    assert not baseline(runner, task, wt, Suite(targets=("tests/test_empty.py",), label="x")).statuses
    assert not list(cached.glob("*.json"))
    assert baseline(runner, task, wt, Suite(targets=("tests/test_calc.py",), label="x")).statuses
    [pinned] = list(cached.glob("*.json"))
    # A pinned run is read back; one cut short, or pinned with no statuses, is run again and re-pinned.
    kept = json.loads(pinned.read_text())
    for bad in ('{"statuses": {"tests/test_calc.py::test_x"', json.dumps({**kept, "statuses": {}})):
        pinned.write_text(bad)
        again = baseline(runner, task, wt, Suite(targets=("tests/test_calc.py",), label="x"))
        assert again.statuses == kept["statuses"] and again.seconds > 0
        assert json.loads(pinned.read_text())["statuses"] == kept["statuses"]
    read = baseline(runner, task, wt, Suite(targets=("tests/test_calc.py",), label="x"))
    assert read.statuses == kept["statuses"] and read.seconds == 0.0


@pytest.mark.slow
def test_the_patched_run_goes_beside_an_uncached_base_run_and_alone_after_a_cached_one(
        tmp_path: Path, monkeypatch) -> None:
    """The first check of a patch runs the base and the patched tests side by side (the verdict is
    the same as one after the other); a later check finds the base run cached and runs the patched
    tests alone. With ``patched_beside_base`` off, the runs follow each other."""
    import threading
    import time

    from scoring.execution.runner import SubprocessRunner

    real = SubprocessRunner.run_suite
    spans: list[tuple[bool, float, float]] = []
    lock = threading.Lock()

    def timed(self, task, wt, patch, suite):  # noqa: ANN001
        start = time.monotonic()
        time.sleep(1.0)  # long enough that two runs started together overlap on any machine
        run = real(self, task, wt, patch, suite)
        with lock:
            spans.append((patch is None, start, time.monotonic()))
        return run

    monkeypatch.setattr(SubprocessRunner, "run_suite", timed)
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a + b", "return a + b + 1")))

    def check(cache: str, **settings: Any):
        spans.clear()
        # Not confirmed (the patch breaks test_add): the spans here are the first runs only.
        return own_outcome(make_runner(local_settings(), tmp_path / cache), task, wt, patch, [],
                           RegressionSettings(**{"confirm_runs": 0, **settings}))

    def overlapped() -> bool:
        [(_, b0, b1)] = [s for s in spans if s[0]]
        [(_, p0, p1)] = [s for s in spans if not s[0]]
        return p0 < b1 and b0 < p1

    first = check("cache")
    assert first.pass_to_pass_after["tests/test_calc.py::test_add"] == "FAILED" and overlapped()
    again = check("cache")
    assert [s[0] for s in spans] == [False] and again.pass_to_pass_after == first.pass_to_pass_after
    apart = check("cache-apart", patched_beside_base=False)
    assert not overlapped() and apart.pass_to_pass_after == first.pass_to_pass_after
    assert apart.pass_to_pass_before == first.pass_to_pass_before


@pytest.mark.slow
def test_a_base_run_on_a_busy_machine_is_priced_as_on_an_idle_one(tmp_path: Path, monkeypatch) -> None:
    """Seconds measured while the machine ran four processes per core are a quarter of that on an
    idle one: else a file measured under load is priced out of every later selection, and, never
    selected again, never measured again."""
    from scoring.execution import choose_tests, testenv

    monkeypatch.setattr(testenv, "slowdown", lambda: 4.0)
    outcome, _ = _judge(tmp_path, CALC.replace("def label(x):", "def label(x):  # formats x"))
    [entry] = choose_tests.CostBook(tmp_path / "cache", REPO, "").book.values()
    assert entry["n"] == 2 and abs(entry["s"] - outcome.base_seconds / 4) < 0.02, (entry, outcome.base_seconds)
    # A run cut by its timeout is a lower bound, on the same scale.
    mirrors, commit = make_repo(tmp_path / "cut", {"calc.py": CALC, "tests/test_calc.py": TESTS})
    wt = RepoCache(tmp_path / "cut" / "cache", mirrors).worktree(REPO, commit, "rt")
    book = choose_tests.CostBook(tmp_path / "cut" / "cache", REPO, "")
    book.record_timeout(wt, ["tests/test_calc.py"], {}, 300.0, slowed=4.0)
    assert book.book["tests/test_calc.py"] == {"s": 75.0, "n": 0}


@pytest.mark.slow
def test_a_run_killed_by_its_timeout_still_reports_the_tests_it_finished(tmp_path: Path) -> None:
    """pytest prints its summary at the end: a run killed by its timeout printed none, and every
    test it had finished was lost. The plugin writes each outcome as it comes."""
    from scoring.execution.outcomes import Suite

    hang = "import time\n\n\ndef test_hang():\n    time.sleep(120)\n"
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS, "tests/test_zz_hang.py": hang})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-rt", repo=REPO, base_commit=commit, problem_statement="")
    run = make_runner(local_settings(), tmp_path / "cache").run_suite(
        task, wt, None, Suite(targets=("tests/test_calc.py", "tests/test_zz_hang.py"), timeout_s=8,
                              finished_on_timeout=True))
    assert run.timed_out
    assert run.statuses == {"tests/test_calc.py::test_add": "PASSED", "tests/test_calc.py::test_scale": "PASSED"}
    # the harness's kind of run (pytest's summary only) reports nothing from a killed run
    same = make_runner(local_settings(), tmp_path / "cache").run_suite(
        task, wt, None, Suite(targets=("tests/test_calc.py", "tests/test_zz_hang.py"), timeout_s=8))
    assert same.timed_out and same.statuses == {}


# sympy 1.0's bin/test on Python 3.7 (AutoCodeRover run 2's sympy-12481): a test module that no
# longer imports makes the runner's reporter die of its own AttributeError while handling the
# ValueError the patched permutations.py raised; the last traceback is the runner's.
RUNNER_CHAINED = """\
sympy/combinatorics/tests/test_generators.py[0] Traceback (most recent call last):
  File "/tmp/run/repo/sympy/utilities/runtests.py", line 1079, in test_file
    exec_(code, gl)
  File "/tmp/run/repo/sympy/combinatorics/tests/test_generators.py", line 1, in <module>
    from sympy.combinatorics.generators import symmetric, cyclic, alternating, dihedral
  File "/tmp/run/repo/sympy/combinatorics/polyhedron.py", line 703, in _pgroup_calcs
    Perm([[1, 2, 3], [0]]),  # cw from top
  File "/tmp/run/repo/sympy/combinatorics/permutations.py", line 906, in __new__
    max(temp))
ValueError: Integers 0 through 3 must be present.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/tmp/run/repo/sympy/utilities/runtests.py", line 1086, in test_file
    reporter.test_exception(sys.exc_info())
  File "/tmp/run/repo/sympy/utilities/runtests.py", line 2217, in test_exception
    self._exceptions.append((self._active_file, self._active_f, exc_info))
AttributeError: 'PyTestReporter' object has no attribute '_active_file'
"""

PERMUTATIONS_PATCH = """\
diff --git a/sympy/combinatorics/permutations.py b/sympy/combinatorics/permutations.py
--- a/sympy/combinatorics/permutations.py
+++ b/sympy/combinatorics/permutations.py
@@ -900,1 +900,1 @@
-        temp = flatten(args)
+        temp = flatten(args)  # changed
"""


def test_a_chained_traceback_is_read_to_the_patched_frame_before_the_runner_s_own_error() -> None:
    from scoring.execution.outcomes import TestOutcome

    wanted = ["test_Permutation", "test_josephus"]
    recs = failures_of([], RUNNER_CHAINED, "/tmp/run/repo", wanted, unreported=wanted)
    assert [(r["test"], r["type"]) for r in recs] == [
        ("test_Permutation", "ValueError"), ("test_josephus", "ValueError"),
        ("test_Permutation", "AttributeError"), ("test_josephus", "AttributeError")], recs
    outcome = TestOutcome(runnable=True, reason="", source="own", regression_crashes=recs)
    [found] = runtime_findings(outcome, PERMUTATIONS_PATCH)
    finding: dict[str, Any] = dict(found)
    assert (finding["rule"], finding["file"], finding["line"], finding["symbol"]) == (
        "ValueError", "sympy/combinatorics/permutations.py", 906, "__new__"), finding
    # Without the chain's link, only the last traceback is the run's.
    unlinked = RUNNER_CHAINED.replace("During handling of the above exception, another exception occurred:", "")
    assert {r["type"] for r in failures_of([], unlinked, "/tmp/run/repo", wanted, unreported=wanted)} == {
        "AttributeError"}


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["touched", "source"])
def test_the_critic_reads_the_runtime_scope_from_the_config(tmp_path: Path, calc, cfg_factory, scope: str) -> None:
    """End to end: attempt 1 fixes mean() but makes add() return a str, and the untouched
    calc/report.py's total_label() raises TypeError on it in an existing test. With
    ``regression.runtime_scope = "source"`` the Critic says Unsafe with the caller's frame, and the
    Coder's next prompt has it; with ``touched`` it is a plain regression."""
    from eval.fixtures.repos import TESTS_BASE, git_commit_all

    mirrors, inst = calc
    repo = mirrors / "fixture+calc"
    (repo / "calc" / "report.py").write_text(
        'from calc.ops import add\n\n\ndef total_label(a, b):\n    return "%d" % add(a, b)\n')
    (repo / "tests" / "test_ops.py").write_text(
        TESTS_BASE + '\n\ndef test_total_label():\n    from calc.report import total_label\n\n'
        '    assert total_label(2, 3) == "5"\n')
    inst = inst.model_copy(update={"base_commit": git_commit_all(repo, "calc: report")})
    cfg = cfg_factory("redo", **{"regression.runtime_scope": scope})
    model, attempts = _fix_mean_and_change_add(mirrors, inst, cfg, "    return str(a + b)\n")
    first = attempts[0]
    runtime = [f for f in first["findings"] if f["source"] == "runtime"]
    regressions = [f["message"] for f in first["findings"] if f.get("rule") == "regression"]
    if scope == "touched":
        assert first["verdict"] != "Unsafe" and runtime == []
        assert any("test_total_label" in m for m in regressions), regressions
        return
    assert first["verdict"] == "Unsafe"
    [finding] = runtime
    assert (finding["rule"], finding["file"], finding["symbol"]) == ("TypeError", "calc/report.py", "total_label")
    assert finding["code"] == 'return "%d" % add(a, b)'
    # Not reported twice: the crashed test is not also a plain regression finding.
    assert not [m for m in regressions if "test_total_label" in m]
    retry = model.prompts_for("CodeChange")[1]
    assert f"calc/report.py:{finding['line']} in total_label" in retry


REPRO_ADD = '''\
import calc


def test_add_three():
    assert calc.add(1, 2) == 4
'''


@pytest.mark.slow
@pytest.mark.parametrize("new_add, test, found", [
    ("return a + b + '1'", REPRO_ADD, "TypeError"),  # raises in calc.py: runtime evidence
    ("return a + b + 5", REPRO_ADD, None),  # still a wrong result: a failing reproduction test
    ("return a + b + 1", REPRO_ADD.replace("calc.add(1, 2)", "calc.add(1, 2) + None"), None),  # the test's own crash
], ids=["raises-in-source", "assertion", "raises-in-test"])
def test_a_reproduction_test_raising_in_the_repository_s_code_is_a_runtime_finding(
        tmp_path: Path, new_add: str, test: str, found: str | None) -> None:
    """Issue 33: a reproduction test that still fails with the patch by raising in the repository's
    code is runtime evidence, as a regressed test's crash is; an assertion, or a crash in the test's
    own code, stays a failing reproduction test."""
    from scoring.execution.outcomes import ReproTest
    from scoring.runtime.findings import findings_of, repro_summaries

    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC})  # no existing test: the reproduction test alone
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "rt")
    task = Task(instance_id="fixture__calc-repro", repo=REPO, base_commit=commit, problem_statement="")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a + b", new_add)))
    repro = ReproTest("tests/test_repro_add.py", test, ("tests/test_repro_add.py::test_add_three",))
    outcome = own_outcome(make_runner(local_settings(), tmp_path / "cache"), task, wt, patch, [repro],
                          RegressionSettings())
    assert outcome.fail_to_pass == {"tests/test_repro_add.py::test_add_three": "FAILED"}
    assert outcome.repro_ran and crash_summaries(outcome, patch) == []
    for scope in SCOPES:
        findings = [dict(f) for f in findings_of(repro_summaries(outcome, patch), scope)]
        assert [f["rule"] for f in findings] == ([found] if found else [])
        if found:
            assert (findings[0]["file"], findings[0]["symbol"]) == ("calc.py", "add")
            assert "the reproduction test, which should pass with the fix" in findings[0]["message"]
