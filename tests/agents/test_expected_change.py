"""An existing test that asserts the behaviour an issue asks to change: the fix is meant to break
it, so the loop records an expected change (update the test) instead of a regression. The same
failure in a test the issue does not name, a crash, or a patch that breaks more than those tests
stay regressions. Real git repos, real pytest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.regression_bench import main
from fixgraph.config import RegressionSettings
from fixgraph.dataset import Instance, Task
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import RepoCache
from scoring.execution.outcomes import TestOutcome, own_outcome
from scoring.execution.runner import make_runner
from scoring.runtime.crash import failures_of
from scoring.runtime.findings import runtime_findings
from scoring.verdict import expected_change, fix_score
from tests.agents.test_repro_loop import _PRRecorder
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks
from tests.helpers.testrun_helpers import REPO, apply_to, diff_for, local_config, local_settings, make_repo

CALC = '''\
def add(a, b):
    return a + b


def label(x):
    return "n=%d" % x
'''

TESTS = '''\
import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_label_format():
    assert calc.label(4) == "n=4"
'''

ISSUE = """Label format: use a colon, not an equals sign

`calc.label(4)` gives `n=4`; every other report of ours says `n: 4`.
"""
OTHER_ISSUE = """add() overflows on huge integers

Nothing to do with how values are shown.
"""
COLON = CALC.replace('"n=%d" % x', '"n: %d" % x')
LABEL = "tests/test_calc.py::test_label_format"


def _judge(tmp_path: Path, new_calc: str, issue: str) -> tuple[TestOutcome, str, Task]:
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "ec")
    task = Task(instance_id="fixture__calc-ec", repo=REPO, base_commit=commit, problem_statement=issue)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, new_calc))
    runner = make_runner(local_settings(), tmp_path / "cache")
    return own_outcome(runner, task, wt, patch, [], RegressionSettings()), patch, task


@pytest.mark.slow
def test_a_test_asserting_what_the_issue_changes_is_an_expected_change_not_a_regression(tmp_path: Path) -> None:
    outcome, _, task = _judge(tmp_path, COLON, ISSUE)
    assert outcome.pass_to_pass_before[LABEL] == "PASSED" and outcome.pass_to_pass_after[LABEL] == "FAILED"
    assert fix_score.no_regression(outcome) == 0.5  # test_add still passes
    expected = expected_change.of_outcome(outcome, task.problem_statement, task.repo)
    assert expected == {LABEL: ["format", "label"]}
    parts = fix_score.compute(outcome, 1.0, None, leave_out=expected.keys(), why_left_out=expected_change.WHY)
    assert parts["no_regression"] == 1.0 and fix_score.no_regression(outcome, expected) == 1.0
    assert parts["pass_to_pass"][LABEL] == "FAILED"  # left out of the rate, still shown with its status
    assert "assert what the issue asks to change; left out of no_regression: " + LABEL in parts["note"]
    [warning] = expected_change.findings(outcome, expected)
    assert (warning["source"], warning["rule"], warning["severity"]) == ("tests", "expected_change", "warning")
    assert LABEL in warning["message"] and "update it with the fix" in warning["message"]
    assert "n: 4" in warning["message"]  # the assertion's compared values


@pytest.mark.slow
def test_the_same_assertion_failure_in_a_test_the_issue_does_not_name_stays_a_regression(tmp_path: Path) -> None:
    outcome, _, task = _judge(tmp_path, COLON, OTHER_ISSUE)
    assert [r["type"] for r in outcome.regression_crashes] == ["AssertionError"]
    assert expected_change.of_outcome(outcome, task.problem_statement, task.repo) == {}
    assert fix_score.no_regression(outcome, {}) == fix_score.no_regression(outcome) < 1.0


@pytest.mark.slow
def test_a_crash_in_a_test_about_the_issue_stays_an_unsafe_runtime_finding(tmp_path: Path) -> None:
    crashes = CALC.replace('"n=%d" % x', '"n: " + x')
    outcome, patch, task = _judge(tmp_path, crashes, ISSUE)
    assert expected_change.of_outcome(outcome, task.problem_statement, task.repo) == {}
    [found] = runtime_findings(outcome, patch)
    assert (dict(found)["rule"], dict(found)["symbol"]) == ("TypeError", "label")


@pytest.mark.slow
def test_a_patch_that_also_breaks_another_test_keeps_every_regression(tmp_path: Path) -> None:
    """All or nothing: the issue asks for a new label, not a new add()."""
    outcome, _, task = _judge(tmp_path, COLON.replace("return a + b", "return a + b + 1"), ISSUE)
    assert sorted(r["type"] for r in outcome.regression_crashes) == ["AssertionError", "AssertionError"]
    assert expected_change.of_outcome(outcome, task.problem_statement, task.repo) == {}


@pytest.mark.parametrize(("test_id", "title", "shared"), [
    ("xarray/tests/test_groupby.py::test_groupby_repr[obj0-month]",
     "Trailing whitespace in DatasetGroupBy text representation", ["groupby", "repr"]),
    ("test_pretty_sum", "Bad centering for Sum pretty print", ["pretty", "sum"]),
    # One term is not enough: sympy-14817's true regression.
    ("test_MatrixSymbol_printing", "Error pretty printing MatAdd", ["printing"]),
    # The repository's own name says nothing of the subject.
    ("test_requests.py::TestRedirects::test_requests_are_updated_each_time",
     "urllib3 exceptions passing through requests API", []),
])
def test_the_terms_a_test_name_shares_with_the_issue_title(test_id: str, title: str, shared: list[str]) -> None:
    repo = "psf/requests" if "requests" in test_id else "x/y"
    assert expected_change.shared_terms(test_id, f"{title}\n\nbody", repo) == shared


def test_an_unknown_failure_kind_is_never_an_expected_change() -> None:
    """sympy's runner killed by its timeout prints no traceback: the kind is unknown."""
    assert expected_change.expected_changes(["test_pretty_sum"], {"test_pretty_sum": ""},
                                            "Bad centering for Sum pretty print") == {}
    assert expected_change.expected_changes(["test_pretty_sum"], {"test_pretty_sum": "Failed"},
                                            "## Bad centering for Sum pretty print") == {
        "test_pretty_sum": ["pretty", "sum"]}


@pytest.mark.slow
def test_the_bench_does_not_count_an_expected_change_and_scores_old_rows_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The instance's test patch rewrites test_label_format (the fix changes what it asserts):
    the loop, without reading it, does not flag the patch; a row saved before the rule existed
    (no ``broken``, the old ``flagged``) is scored again on --resume, without running tests."""
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS})
    rewritten = TESTS.replace('"n=4"', '"n: 4"')
    inst = Instance(instance_id="fixture__calc-ec", repo=REPO, base_commit=commit, problem_statement=ISSUE,
                    version="", test_patch=diff_for(tmp_path, "tests/test_calc.py", TESTS, rewritten),
                    FAIL_TO_PASS=[LABEL], PASS_TO_PASS=["tests/test_calc.py::test_add"])
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    dataset.write_text(json.dumps(inst.model_dump()) + "\n")
    preds.write_text(json.dumps({"instance_id": inst.instance_id, "system": "agent", "resolved": True,
                                 "model_patch": diff_for(tmp_path, "calc.py", CALC, COLON)}) + "\n")
    config = local_config(tmp_path)
    rows = tmp_path / "rows.jsonl"
    args = ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
            "--config", str(config), "-o", str(rows)]
    assert main(args) == 0  # off by default: counted as a flag, and the figures with the rule beside
    text = capsys.readouterr().out
    assert "TP 0 FP 1 FN 0 TN 0" in text and "with that rule: TP 0 FP 0 FN 0 TN 1" in text
    args.append("--expected-changes")
    assert main([*args, "--rescore"]) == 0
    text = capsys.readouterr().out
    [rec] = map(json.loads, rows.read_text().splitlines())
    # The row keeps what the rule reads; --rescore counts it again without writing anything.
    assert rec["broken"] == [LABEL] and rec["expected_change"] == {LABEL: ["format", "label"]}
    assert rec["visible"] == [] and rec["resolved_here"] is True
    assert "TP 0 FP 0 FN 0 TN 1" in text
    assert ("expected behaviour changes set aside (every broken test an assertion in a test named after the "
            "issue's title): 1 patches, 1 tests; of those tests, rewritten by the instance's test patch: 1; "
            "visible regressions: 0") in text
    assert "without that rule: TP 0 FP 1 FN 0 TN 0" in text

    old = {k: v for k, v in rec.items() if k not in ("broken", "expected_change")} | {"flagged": [LABEL]}
    rows.write_text(json.dumps(old) + "\n")
    for again in ("--resume", "--rescore"):
        assert main([*args, again]) == 0
        text = capsys.readouterr().out
        assert "TP 0 FP 0 FN 0 TN 1" in text and "without that rule: TP 0 FP 1" in text
        assert rows.read_text() == json.dumps(old) + "\n"  # nothing ran again


def test_rescore_judges_no_new_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Beside a run still writing its rows: the rows not yet judged are left out, none is run."""
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TESTS})
    inst = Instance(instance_id="fixture__calc-ec", repo=REPO, base_commit=commit, problem_statement=ISSUE,
                    version="", FAIL_TO_PASS=[LABEL], PASS_TO_PASS=["tests/test_calc.py::test_add"])
    dataset, preds, rows = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl", tmp_path / "rows.jsonl"
    dataset.write_text(json.dumps(inst.model_dump()) + "\n")
    preds.write_text(json.dumps({"instance_id": inst.instance_id, "model_patch": "diff --git a/x b/x\n"}) + "\n")
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                 "-o", str(rows), "--rescore"]) == 0
    assert "1 rows not judged yet are left out" in capsys.readouterr().err
    assert rows.read_text() == ""


@pytest.mark.slow
def test_the_critic_passes_the_fix_warns_about_the_test_and_the_pull_request_says_to_update_it(
        tmp_path: Path, cfg_factory) -> None:
    """End to end: the Coder's one patch does what the issue asks, which breaks the existing
    test_label_format. The Critic says Safe with a warning to update that test (no regression
    finding), no_regression stays 1.0 so the loop does not retry, and the pull request lists it."""
    ops = CALC
    mirrors, commit = make_repo(tmp_path, {
        "calc/__init__.py": "", "calc/ops.py": ops, "tests/__init__.py": "",
        "tests/test_ops.py": TESTS.replace("import calc\n", "from calc import ops as calc\n"),
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1"\n'}, repo="fixture/reports")
    inst = Instance(instance_id="fixture__reports-1", repo="fixture/reports", base_commit=commit,
                    problem_statement=ISSUE, version="0.1")
    repro = "from calc.ops import label\n\n\ndef test_label_uses_a_colon():\n    assert label(4) == 'n: 4'\n"
    model = ScriptedChatModel(script={
        "Plan": [{"files": ["calc/ops.py"], "reasoning": "label() lives in calc/ops.py."}],
        "ExploreStep": [{"next_files": [], "learned": "label() formats with '='.", "confidence": "high",
                         "suspects": [{"file": "calc/ops.py", "symbol": "label", "start_line": 5, "end_line": 6}]}],
        "ReproTestDraft": [{"path": "tests/test_label_issue.py", "content": repro, "explanation": "n: 4."}],
        "CodeChange": [{"edits": [{"path": "calc/ops.py", "search": '    return "n=%d" % x\n',
                                   "replace": '    return "n: %d" % x\n'}], "explanation": "Use a colon."}],
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}] * 3,
        "PatchJudgment": [{"score": 0.9, "reasoning": "Does what the issue asks."}] * 3,
    })
    cfg = cfg_factory("redo", eval_mode=False, **{"regression.expected_changes": True})
    recorder = _PRRecorder(cfg)
    run_tasks([inst], cfg, run_id="ec", repos=mirrors, model_factory=lambda role: model, progress=False,
              publisher=recorder)
    [attempt] = read_record(cfg, "ec", inst.instance_id)["attempts"]
    assert attempt["verdict"] == "Safe"
    assert attempt["score"]["test_pass_rate"] == 1.0 and attempt["score"]["no_regression"] == 1.0
    [warning] = [f for f in attempt["findings"] if f.get("rule") == "expected_change"]
    assert warning["severity"] == "warning" and "tests/test_ops.py::test_label_format" in warning["message"]
    assert not [f for f in attempt["findings"] if f.get("rule") == "regression"]
    [body] = recorder.seen
    assert "[tests/expected_change]" in body and "update it with the fix" in body
    assert "`tests/test_ops.py::test_label_format`: FAILED" in body  # listed with its status, not hidden


def test_sympy_s_raises_that_did_not_raise_is_a_failed_expectation_not_a_crash() -> None:
    """sympy's runner prints a failed ``raises()`` as an exception (``E``) of type Failed: read from
    its log, the kind is Failed (an assertion's), never a runtime finding."""
    log = ("test_ndim_array_initiation E\n"
           "___ sympy/tensor/array/tests/test_immutable_ndim_array.py:test_ndim_array_initiation ___\n"
           "Traceback (most recent call last):\n"
           '  File "/tmp/run/repo/sympy/tensor/array/tests/test_immutable_ndim_array.py", line 25, '
           "in test_ndim_array_initiation\n"
           "    raises(ValueError, lambda: ImmutableDenseNDimArray([], shape=()))\n"
           '  File "/tmp/run/repo/sympy/testing/pytest.py", line 119, in raises\n'
           '    raise Failed("DID NOT RAISE")\n'
           "sympy.testing.pytest.Failed: DID NOT RAISE\n")
    [rec] = failures_of([], log, "/tmp/run/repo", ["test_ndim_array_initiation"])
    assert (rec["type"], rec["message"]) == ("Failed", "DID NOT RAISE")
    outcome = TestOutcome(runnable=True, reason="", pass_to_pass_before={"test_ndim_array_initiation": "PASSED"},
                          pass_to_pass_after={"test_ndim_array_initiation": "FAILED"}, regression_crashes=[rec])
    assert runtime_findings(outcome, "") == []
    assert expected_change.of_outcome(outcome, "Ndim array initiation rejects empty shapes") == {
        "test_ndim_array_initiation": ["array", "initiation", "ndim"]}


# sympy-24102's log as this machine's sympy 1.12 runner printed it: the name is long, so the header
# centred in 80 columns keeps two underscores on the left.
LONG_NAME_LOG = """\
sympy/parsing/tests/test_mathematica.py[3]
test_mathematica ok
test_parser_mathematica_tokenizer F
test_parser_mathematica_exp_alt ok                                        [FAIL]


________________________________________________________________________________
__ sympy/parsing/tests/test_mathematica.py:test_parser_mathematica_tokenizer ___
Traceback (most recent call last):
  File "/tmp/run/repo/sympy/parsing/tests/test_mathematica.py", line 92, in test_parser_mathematica_tokenizer
    assert chain("42") == "42"
AssertionError

============= tests finished: 2 passed, 1 failed, in 1.25 seconds ==============
"""


def test_sympy_s_header_of_a_long_test_name_is_read() -> None:
    [rec] = failures_of([], LONG_NAME_LOG, "/tmp/run/repo", ["test_parser_mathematica_tokenizer"])
    assert rec["type"] == "AssertionError" and rec["test"] == "test_parser_mathematica_tokenizer", rec
    assert rec["frames"][-1]["line"] == 92, rec
    # Longer still, the header has no underscore left at all.
    bare = LONG_NAME_LOG.replace("__ sympy/parsing/tests/test_mathematica.py:test_parser_mathematica_tokenizer ___",
                                 " sympy/parsing/tests/test_mathematica.py:test_parser_mathematica_tokenizer ")
    [rec] = failures_of([], bare, "/tmp/run/repo", ["test_parser_mathematica_tokenizer"])
    assert rec["type"] == "AssertionError", rec


def test_a_sympy_run_killed_by_its_timeout_keeps_the_kinds_its_f_and_e_say() -> None:
    """sympy's runner prints its tracebacks only at the end, which a run killed by its timeout never
    reaches; but it says F (an AssertionError, nothing else) or E (any other exception) as each test
    ends. F is a failed assertion; E stays unknown."""
    from scoring.execution.specs import parse_log
    from scoring.runtime.crash import assertions_by_status

    killed = LONG_NAME_LOG.split("\n\n\n", 1)[0].replace("test_mathematica ok", "test_mathematica E")
    statuses = parse_log("sympy/sympy", killed)
    wanted = ["test_mathematica", "test_parser_mathematica_tokenizer"]
    assert failures_of([], killed, "/tmp/run/repo", wanted) == []  # no traceback to read
    recs = assertions_by_status(statuses, wanted, [])
    assert [(r["test"], r["type"]) for r in recs] == [("test_parser_mathematica_tokenizer", "AssertionError")]
    outcome = TestOutcome(runnable=True, reason="", pass_to_pass_before=dict.fromkeys(wanted, "PASSED"),
                          pass_to_pass_after={t: statuses[t] for t in wanted}, regression_crashes=recs)
    assert expected_change.failure_kinds(outcome) == {"test_parser_mathematica_tokenizer": "AssertionError"}
    assert runtime_findings(outcome, "") == []  # an assertion is never a runtime finding
    # A record read from the log already explains its test: no second one.
    [known] = failures_of([], LONG_NAME_LOG, "/tmp/run/repo", wanted)
    assert assertions_by_status(parse_log("sympy/sympy", LONG_NAME_LOG), wanted, [known]) == []
