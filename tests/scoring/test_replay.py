"""The Critic's replay: the issue's own code run at the base and with the patch (real sandbox,
real git fixture repository, real patches), compared statement by statement."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from fixgraph.dataset import Task
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import RepoCache, Worktree
from fixgraph.sandbox.process import sandbox_mode
from scoring.execution.runner import SubprocessRunner, make_runner
from scoring.runtime import replay
from scoring.runtime.issue_run import IssueTrace, TracedError
from tests.helpers.testrun_helpers import local_settings, make_repo

REPO = "fixture/shapes"
CORE = """\
def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative side")
    return w * h


def scale(values, k):
    return [v * k for v in values]
"""
FILES = {"shapes/__init__.py": "from .core import area, scale\n", "shapes/core.py": CORE, "README.md": "shapes\n"}

ISSUE_CLEAN = """`scale` should accept a tuple and return one.

```python
from shapes import area, scale
print(area(2, 3))
print(scale((1, 2), 3))
```
"""
ISSUE_CRASH = """`area` raises ValueError for a zero-width box built from a negative offset.

```python
from shapes import area
area(-0, 4)
area(-1, 4)
```

It fails with `ValueError: negative side`; it should give 0 for negative sides.
"""



def _patch(before: str, after: str, path: str = "shapes/core.py") -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


# Introduces a NameError inside the repository on the issue's path (``kk`` is not defined).
NAME_ERROR = _patch(CORE, CORE.replace("return [v * k for v in values]", "return type(values)(v * kk for v in values)"))
GOOD_SCALE = _patch(CORE, CORE.replace("return [v * k for v in values]", "return type(values)(v * k for v in values)"))
# Touches the file but not the crash the issue reports.
NOT_A_FIX = _patch(CORE, CORE.replace("def area(w, h):\n", 'def area(w, h):\n    """The area of a w by h box."""\n'))
GOOD_AREA = _patch(CORE, CORE.replace('raise ValueError("negative side")', "return 0"))
# Turns the reported ValueError into a TypeError the issue never asked for.
OTHER_CRASH = _patch(CORE, CORE.replace('raise ValueError("negative side")', "return len(w)"))

sandboxed = pytest.mark.skipif(sandbox_mode() == "none", reason="no sandbox on this machine")


@pytest.fixture
def fixture(tmp_path: Path) -> tuple[SubprocessRunner, Path, str, Worktree]:
    mirrors, commit = make_repo(tmp_path, FILES, repo=REPO)
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "fixture__shapes-1")
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    assert isinstance(runner, SubprocessRunner)
    return runner, tmp_path, commit, wt


def _task(commit: str, issue: str) -> Task:
    return Task(instance_id="fixture__shapes-1", repo=REPO, base_commit=commit, problem_statement=issue)


def _replayed(fixture: tuple[SubprocessRunner, Path, str, Worktree], issue: str, patch: str) -> replay.Replay:
    runner, _, commit, wt = fixture
    wt.apply(patch)
    try:
        return replay.replay_issue(runner, _task(commit, issue), wt, patch, timeout_s=30)
    finally:
        wt.reset()


# ---- against the real sandbox --------------------------------------------------------------


@pytest.mark.slow
@sandboxed
def test_a_crash_the_patch_introduces_on_the_issues_path_is_a_finding_with_its_frame(fixture) -> None:
    result = _replayed(fixture, ISSUE_CLEAN, NAME_ERROR)
    assert result.base.reason == "" and result.base.errors == []
    assert [(s["kind"], s["type"], s["statement"]) for s in result.summaries] == [("introduced", "NameError", 2)]
    assert result.summaries[0]["frame"][0] == "shapes/core.py"
    assert result.summaries[0]["touched"][0] == "shapes/core.py"
    (finding,) = replay.findings_of(result.summaries)
    message = finding.get("message", "")
    assert finding.get("source") == "runtime" and finding.get("rule") == "NameError"
    assert finding.get("file") == "shapes/core.py" and finding.get("symbol") in ("scale", "<genexpr>")
    assert "name 'kk' is not defined" in message
    assert "statement 3 of the issue's code" in message and "ran without an error" in message
    assert "introduced NameError at statement 3" in result.note


@pytest.mark.slow
@sandboxed
def test_a_correct_patch_and_one_the_issue_never_reaches_stay_clean(fixture) -> None:
    assert _replayed(fixture, ISSUE_CLEAN, GOOD_SCALE).summaries == []
    # The issue's code never reaches the changed line: the same run as the base.
    result = _replayed(fixture, ISSUE_CLEAN, GOOD_AREA)
    assert result.summaries == [] and "no new error" in result.note


@pytest.mark.slow
@sandboxed
def test_the_issues_reported_crash_still_raised_means_the_patch_does_not_fix_it(fixture) -> None:
    result = _replayed(fixture, ISSUE_CRASH, NOT_A_FIX)
    assert [(s["kind"], s["type"]) for s in result.summaries] == [("persists", "ValueError")]
    assert result.summaries[0]["base"] == {"type": "ValueError", "message": "negative side"}
    (finding,) = replay.findings_of(result.summaries)
    assert "the issue reports this exception" in finding.get("message", "")
    assert _replayed(fixture, ISSUE_CRASH, GOOD_AREA).summaries == []


@pytest.mark.slow
@sandboxed
def test_an_exception_type_the_issue_does_not_ask_for_is_a_changed_crash(fixture) -> None:
    result = _replayed(fixture, ISSUE_CRASH, OTHER_CRASH)
    assert [(s["kind"], s["type"], s["base"]["type"]) for s in result.summaries] == [
        ("changed", "TypeError", "ValueError")]
    # An issue that asks for the TypeError gets it.
    asks = ISSUE_CRASH.replace("it should give 0", "it should raise TypeError")
    assert _replayed(fixture, asks, OTHER_CRASH).summaries == []


@pytest.mark.slow
@sandboxed
def test_the_patched_run_is_cached_by_patch_and_the_base_run_is_shared(fixture) -> None:
    first = _replayed(fixture, ISSUE_CLEAN, NAME_ERROR)
    again = _replayed(fixture, ISSUE_CLEAN, NAME_ERROR)
    other = _replayed(fixture, ISSUE_CLEAN, GOOD_SCALE)
    assert first.patched is not None and again.patched is not None and other.patched is not None
    assert not first.base.cached and not first.patched.cached
    assert again.base.cached and again.patched.cached and again.summaries == first.summaries
    assert other.base.cached and not other.patched.cached


@pytest.mark.slow
@sandboxed
def test_a_hostile_patch_cannot_write_outside_its_copy_or_read_a_secret(fixture, monkeypatch) -> None:
    runner, tmp_path, commit, wt = fixture
    outside = tmp_path / "escaped.txt"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-replay-secret-1234567890")
    hostile = _patch(CORE, CORE.replace("    return [v * k for v in values]", (
        "    import os\n"
        f"    open({str(outside)!r}, 'w').write(os.environ.get('OPENAI_API_KEY', 'none'))\n"
        "    raise KeyError(os.environ.get('OPENAI_API_KEY', 'no key'))")))
    result = _replayed(fixture, ISSUE_CLEAN, hostile)
    assert not outside.exists()
    (summary,) = result.summaries
    # Writing outside the copy fails first (read-only or absent), whatever the sandbox's kind.
    assert summary["type"] in ("PermissionError", "OSError", "FileNotFoundError")
    assert "sk-replay-secret" not in repr(result.to_dict())


RUNTIME_ONLY = "    return sum(values) / len(values.count)\n"  # TypeError when run; pyright sees no type


@pytest.mark.slow
@sandboxed
def test_in_the_graph_the_replay_rejects_a_patch_before_its_tests_and_tells_the_coder(calc, cfg_factory) -> None:
    """The whole loop, scripted LLM: the first patch passes static analysis and the LLM check, and
    crashes when the issue's code runs; the Critic says Unsafe with the replay's finding, the
    Coder's retry prompt has it, and the second patch passes the replay."""
    from eval.fixtures import repos as fixtures
    from fixgraph.models.scripted import ScriptedChatModel
    from tests.conftest import read_record
    from tests.helpers.run_graph import run_tasks

    mirrors, inst = calc
    inst = inst.model_copy(update={"problem_statement": fixtures.PROBLEM + (
        "\n```python\nfrom calc.ops import mean\nprint(mean([1, 2, 3]))\n```\n")})
    script = fixtures.calc_script(first_attempt_broken=False)
    edit = {"path": "calc/ops.py", "search": fixtures.BUGGY_LINE, "replace": RUNTIME_ONLY}
    script["CodeChange"].insert(0, {"edits": [edit], "explanation": "Divide by the count."})
    model = ScriptedChatModel(script=script)
    cfg = cfg_factory("redo")
    run_tasks([inst], cfg, run_id="replay", repos=mirrors, model_factory=lambda role: model, progress=False)
    first, second = read_record(cfg, "replay", inst.instance_id)["attempts"]

    assert first["verdict"] == "Unsafe"
    [finding] = [f for f in first["findings"] if f["source"] == "runtime"]
    assert finding["rule"] == "TypeError" and finding["file"] == "calc/ops.py" and finding["symbol"] == "mean"
    assert "statement 3 of the issue's code" not in finding["message"]  # two statements: the import, the print
    assert "statement 2 of the issue's code" in finding["message"]
    assert first["score"]["replay"]["ran"] is True
    assert first["score"]["note"] == "rejected by the Critic before running tests"
    retry_prompt = model.prompts_for("CodeChange")[1]
    assert "statement 2 of the issue's code, run with the patch" in retry_prompt
    assert second["verdict"] == "Safe" and second["score"]["replay"]["summaries"] == []


# ---- the comparison's rule, on recorded traces -------------------------------------------


def _trace(statements: int, *errors: TracedError) -> IssueTrace:
    return IssueTrace(statements=statements, errors=list(errors), snippets=1)


def _err(statement: int, etype: str, message: str = "boom", path: str = "pkg/mod.py") -> TracedError:
    return TracedError(etype, message, [(path, 3, "f")] if path else [], statement)


# Errors of statement 0 that say nothing about the repository's code: neither a finding of the
# replay nor a crash the issue reports.
NOT_REPOSITORY_CRASHES = {
    "no repository frame (the issue's own code)": _err(0, "TypeError", path=""),
    "raised in test code": _err(0, "TypeError", path="pkg/tests/test_mod.py"),
    "the statement timer": _err(0, "StatementTimeout"),
    "the prelude": _err(0, "prelude:TypeError", path=""),
}


def test_only_repository_crashes_in_statements_both_runs_reached_count() -> None:
    base = _trace(3)
    cases = {"assertion": _err(0, "AssertionError"), **NOT_REPOSITORY_CRASHES}
    for why, err in cases.items():
        assert replay.compare(base, _trace(3, err), "", "") == [], why
    # A statement only the patched run reached (the base run was cut before it) is not compared.
    assert replay.compare(_trace(1), _trace(3, _err(2, "TypeError")), "", "") == []
    assert [s["kind"] for s in replay.compare(base, _trace(3, _err(2, "TypeError")), "", "")] == ["introduced"]


def test_a_base_run_that_did_not_run_or_did_not_reach_the_repository_compares_nothing() -> None:
    assert replay.compare(IssueTrace(reason="no environment"), _trace(2, _err(0, "TypeError")), "", "") == []
    # At the base the statement failed in the issue's own code (an undefined name): no comparison.
    assert replay.compare(_trace(2, _err(0, "NameError", path="")), _trace(2, _err(0, "TypeError")), "", "") == []
    assert replay.compare(_trace(2, _err(0, "StatementTimeout")), _trace(2, _err(0, "TypeError")), "", "") == []


def test_persists_needs_the_issue_to_name_the_type_and_the_same_message() -> None:
    base = _trace(1, _err(0, "KeyError", "'a' at 0x7f00aa"))
    same = _trace(1, _err(0, "KeyError", "'a' at 0x7f11bb"))
    assert [s["kind"] for s in replay.compare(base, same, "It raises KeyError: 'a'", "")] == ["persists"]
    assert replay.compare(base, same, "It raises an error", "") == []  # the issue names no type
    assert replay.compare(base, same, "It raises MyKeyError", "") == []  # a word, not a part of one
    moved = _trace(1, _err(0, "KeyError", "'b'"))
    assert replay.compare(base, moved, "It raises KeyError", "") == []  # a different failure now


def test_a_dotted_exception_type_is_named_by_its_last_part() -> None:
    base = _trace(1, _err(0, "sympy.core.sympify.SympifyError", "bad"))
    patched = _trace(1, _err(0, "sympy.core.sympify.SympifyError", "bad"))
    assert [s["kind"] for s in replay.compare(base, patched, "SympifyError: bad", "")] == ["persists"]


# ---- the issue's code as a reproduction test -----------------------------------------------


def _statuses(base: IssueTrace, patched: IssueTrace, issue: str) -> dict[str, str]:
    return {r["id"]: r["status"] for r in replay.reproductions(base, patched, issue)}


def test_the_reported_crash_gone_is_a_passing_reproduction_and_still_there_a_failing_one() -> None:
    issue = "area(-1, 4) raises ValueError: negative side"
    base = _trace(3, _err(2, "ValueError", "negative side"))
    assert _statuses(base, _trace(3), issue) == {"issue code::statement 3": "PASSED"}
    # The same type with another message is still the crash the issue reports: failing, not a finding.
    still = _trace(3, _err(2, "ValueError", "sides must be >= 0"))
    assert _statuses(base, still, issue) == {"issue code::statement 3": "FAILED"}
    assert replay.compare(base, still, issue, "") == []
    # Another exception: passing when the issue names it (it asks for it), else failing.
    other = _trace(3, _err(2, "TypeError", "bad side"))
    assert _statuses(base, other, issue) == {"issue code::statement 3": "FAILED"}
    assert _statuses(base, other, issue + "; it should raise TypeError") == {"issue code::statement 3": "PASSED"}
    (entry,) = replay.reproductions(base, still, issue)
    assert entry["detail"] == ("statement 3 of the issue's code raises ValueError: negative side at pkg/mod.py:3 "
                               "in f at the base commit; with the patch it raises ValueError: sides must be >= 0 "
                               "at pkg/mod.py:3 in f")


def test_only_a_crash_the_issue_reports_inside_the_repository_is_a_reproduction() -> None:
    issue = "It raises ValueError, TypeError and KeyError."
    clean = _trace(2)
    not_reproductions = {"the issue does not name it": _err(0, "ZeroDivisionError"), **NOT_REPOSITORY_CRASHES}
    for why, err in not_reproductions.items():
        assert replay.reproductions(_trace(2, err), clean, issue) == [], why
    base = _trace(2, _err(1, "KeyError", "'a'"))
    # A statement the patched run never reached, or cut by its timer, says nothing.
    assert replay.reproductions(base, _trace(1), issue) == []
    assert replay.reproductions(base, _trace(2, _err(1, "StatementTimeout")), issue) == []
    # At most MAX_REPRODUCTIONS, the first ones.
    many = _trace(30, *(_err(i, "KeyError", f"'{i}'") for i in range(30)))
    kept = replay.reproductions(many, _trace(30), issue)
    assert [r["id"] for r in kept] == [replay.reproduction_id(i) for i in range(replay.MAX_REPRODUCTIONS)]
    # Either run that did not happen gives nothing.
    assert replay.reproductions(IssueTrace(reason="no environment"), clean, issue) == []
    assert replay.reproductions(base, IssueTrace(reason="env could not be built"), issue) == []


@pytest.mark.slow
@sandboxed
def test_the_sandboxed_replay_reproduces_the_issues_crash_without_an_llm(fixture) -> None:
    fixed = _replayed(fixture, ISSUE_CRASH, GOOD_AREA)
    assert fixed.reproduced == [{
        "id": "issue code::statement 3", "status": "PASSED",
        "detail": "statement 3 of the issue's code raises ValueError: negative side at shapes/core.py:3 in area "
                  "at the base commit; with the patch it runs clean"}]
    assert "the reported crash reproduced by 1, 1 passing with the patch" in fixed.note
    assert fixed.to_dict()["reproduced"] == fixed.reproduced
    unfixed = _replayed(fixture, ISSUE_CRASH, NOT_A_FIX)
    assert [(r["id"], r["status"]) for r in unfixed.reproduced] == [("issue code::statement 3", "FAILED")]
    # An issue whose code raises nothing reproduces nothing.
    assert _replayed(fixture, ISSUE_CLEAN, GOOD_SCALE).reproduced == []


EMPTY_MEAN = """mean() of an empty list crashes

```python
from calc.ops import mean
mean([])
```

It raises `ZeroDivisionError: division by zero`; the mean of nothing should be 0.0.
"""
# Still raises the reported type, with its own message: not a finding, a failing reproduction.
RAISES_ANOTHER_WAY = ("    if not values:\n        raise ZeroDivisionError('mean of an empty sequence')\n"
                      "    return sum(values) / len(values) - 1\n")
RETURNS_ZERO = "    return sum(values) / len(values) - 1 if values else 0.0\n"


def _empty_mean_run(calc, cfg_factory, issue_code: bool) -> tuple[list[dict], ScriptedChatModel]:
    """The loop on the empty-mean issue with no LLM-written reproduction test (``repro.enabled``
    off): the first patch keeps the crash, the second removes it. The scripted LLM judges both 0.9."""
    from eval.fixtures import repos as fixtures
    from tests.conftest import read_record
    from tests.helpers.run_graph import run_tasks

    mirrors, inst = calc
    inst = inst.model_copy(update={"problem_statement": EMPTY_MEAN})
    script = fixtures.calc_script(first_attempt_broken=False)
    edit = {"path": "calc/ops.py", "search": fixtures.BUGGY_LINE}
    script["CodeChange"] = [{"edits": [edit | {"replace": RAISES_ANOTHER_WAY}], "explanation": "Say why."},
                            {"edits": [edit | {"replace": RETURNS_ZERO}], "explanation": "0.0 for nothing."}]
    model = ScriptedChatModel(script=script)
    cfg = cfg_factory("redo", **{"repro.enabled": False, "repro.issue_code": issue_code})
    run_tasks([inst], cfg, run_id="issue-code", repos=mirrors, model_factory=lambda role: model, progress=False)
    return read_record(cfg, "issue-code", inst.instance_id)["attempts"], model


@pytest.mark.slow
@sandboxed
def test_in_the_graph_the_issues_own_code_is_the_reproduction_test_that_decides_the_retry(calc, cfg_factory) -> None:
    attempts, model = _empty_mean_run(calc, cfg_factory, issue_code=True)
    first, second = attempts
    # The crash is still there (another message): Safe, but the reproduction fails and the loop retries.
    assert first["verdict"] == "Safe" and first["score"]["replay"]["summaries"] == []
    assert first["score"]["kind"] == "tests" and first["score"]["test_pass_rate"] == 0.0
    assert first["score"]["fail_to_pass"] == {"issue code::statement 2": "FAILED"}
    assert first["score"]["llm_score"] is None  # the tests decided: no LLM judgment was needed
    assert any(f["rule"] == "reproduction" and "issue code::statement 2" in f["message"] for f in first["findings"])
    retry_prompt = model.prompts_for("CodeChange")[1]
    assert "with the patch it raises ZeroDivisionError: mean of an empty sequence" in retry_prompt
    assert second["score"]["fail_to_pass"] == {"issue code::statement 2": "PASSED"}
    assert second["score"]["test_pass_rate"] == 1.0 and second["score"]["fix_score"] >= 0.8
    assert model.prompts_for("PatchJudgment") == []


@pytest.mark.slow
@sandboxed
def test_without_the_issues_code_as_a_test_the_llms_word_lets_the_crash_through(calc, cfg_factory) -> None:
    attempts, model = _empty_mean_run(calc, cfg_factory, issue_code=False)
    (only,) = attempts  # the LLM's 0.9 stands in for the missing reproduction: over the threshold
    assert only["score"]["kind"] == "partial" and only["score"]["test_pass_rate"] is None
    assert only["score"]["fail_to_pass"] == {} and only["score"]["llm_score"] == 0.9
    assert "mean of an empty sequence" in only["patch"]


def test_the_pull_request_delivers_the_llms_test_file_not_the_issues_statements() -> None:
    from agents.pr_agent import _repro_to_deliver
    from fixgraph.state import AttemptRecord, TaskState

    state = TaskState(repro={"status": "accepted", "path": "tests/test_issue.py", "content": "def test_x(): ..."})
    score = {"tests_source": "own", "fail_to_pass": {"tests/test_issue.py::test_x": "PASSED",
                                                     replay.reproduction_id(1): "FAILED"}}
    delivered = _repro_to_deliver(state, AttemptRecord(number=1, score=score))
    assert delivered is not None and delivered["tests"] == ["tests/test_issue.py::test_x"]
    # Only the issue's statements passing, and no LLM test accepted: nothing to deliver.
    only = {"tests_source": "own", "fail_to_pass": {replay.reproduction_id(1): "PASSED"}}
    assert _repro_to_deliver(TaskState(), AttemptRecord(number=1, score=only)) is None
    assert _repro_to_deliver(state, AttemptRecord(number=1, score=only)) is None


GUARD_PATCH = '''diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,6 @@
 def f(n):
+    if isinstance(n, float):
+        raise TypeError(
+            "n does not take a float")
+    x = n + None
     return range(n)
'''


def test_the_error_the_issue_asks_for_raised_by_the_patch_s_own_raise_is_no_finding() -> None:
    """scikit-learn-11040: the issue asks for a helpful TypeError when n is a float. The patch's
    own ``raise`` now stops statement 0, which ran clean at the base; statement 1 then raises the
    reported error again, from a state the base never had. Neither is a finding, and statement 1
    is no failing reproduction of the reported crash."""
    issue = "NearestNeighbors(n_neighbors=3.) gives TypeError: 'float' object cannot be interpreted as an integer"
    reported = "'float' object cannot be interpreted as an integer"
    base = _trace(2, _err(1, "TypeError", reported))

    def at(line: int, etype: str = "TypeError", message: str = "n does not take a float") -> TracedError:
        return TracedError(etype, message, [("pkg/mod.py", line, "f")], 0)

    after = [at(3), _err(1, "TypeError", reported)]
    for line in (3, 4):  # the raise's first line, or its last (Python before 3.8)
        after[0] = at(line)
        assert replay.asked_for(base, _trace(2, *after), issue, GUARD_PATCH) == 0
        assert replay.compare(base, _trace(2, *after), issue, GUARD_PATCH) == []
        assert replay.reproductions(base, _trace(2, *after), issue, GUARD_PATCH) == []
    # Raised elsewhere than by an added raise (a line the patch added, not a raise: line 5), of a
    # type the issue does not name, or with no patch to read: still the replay's finding.
    for err, text, patch in ((at(5), issue, GUARD_PATCH), (at(3, "ValueError"), issue, GUARD_PATCH),
                             (at(3), issue, "")):
        trace = _trace(2, err, _err(1, "TypeError", reported))
        assert replay.asked_for(base, trace, text, patch) is None
        assert [s["kind"] for s in replay.compare(base, trace, text, patch)] == ["introduced", "persists"]
