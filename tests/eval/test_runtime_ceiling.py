"""eval.runtime_ceiling: which labelled positives an existing test could reveal, from the harness's log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import runtime_ceiling
from fixgraph.dataset import Instance

PATCH = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1 +1 @@\n-a\n+b\n"

SYMPY_P2P_CRASH = """\
sympy/core/tests/test_mod.py[3]
test_old E
test_new E
________________________________________________________________________________
______________ pkg/tests/test_mod.py:test_old ______________
Traceback (most recent call last):
  File "/opt/repo/pkg/tests/test_mod.py", line 11, in test_old
    assert f(1) == 2
  File "/opt/repo/pkg/mod.py", line 61, in f
    if isinstance(x, Piecewise):
NameError: name 'Piecewise' is not defined
"""

PYTEST_F2P_ONLY = """\
=================================== FAILURES ===================================
___________________________________ test_new ___________________________________

    def test_new():
>       assert mod.new_api(1) == 2
E       AttributeError: module 'pkg.mod' has no attribute 'new_api'

pkg/tests/test_mod.py:7: AttributeError
=========================== short test summary info ============================
PASSED pkg/tests/test_mod.py::test_old
FAILED pkg/tests/test_mod.py::test_new - AttributeError: module 'pkg.mod' has no...
========================= 1 failed, 1 passed in 0.09s ==========================
"""

PYTEST_P2P_ASSERTION = """\
FAILED pkg/tests/test_mod.py::test_old - AssertionError: assert 1 == 2
FAILED pkg/tests/test_mod.py::test_new - TypeError: f() takes 1 positional argument
"""


def _inst(ids_f2p: list[str], ids_p2p: list[str]) -> Instance:
    return Instance(instance_id="o__r-1", repo="o/r", base_commit="0" * 40, problem_statement="x",
                    version="1.0", FAIL_TO_PASS=ids_f2p, PASS_TO_PASS=ids_p2p)


def _row(excerpt: str, kind: str = "runtime_error") -> dict[str, object]:
    return {"instance_id": "o__r-1", "system": "s", "model_patch": PATCH, "failure_kind": kind,
            "log": {"error_excerpt": excerpt, "log_tail": ""}}


def test_an_existing_test_that_crashes_in_the_patched_file_is_revealable() -> None:
    kind, test = runtime_ceiling.classify(_row(SYMPY_P2P_CRASH), _inst(["test_new"], ["test_old"]))
    assert (kind, test) == ("p2p_runtime_touched", "pkg/tests/test_mod.py:test_old")


def test_a_crash_only_in_the_instance_s_new_tests_is_not() -> None:
    inst = _inst(["pkg/tests/test_mod.py::test_new"], ["pkg/tests/test_mod.py::test_old"])
    assert runtime_ceiling.classify(_row(PYTEST_F2P_ONLY), inst)[0] == "f2p_only"


def test_an_existing_test_that_fails_an_assertion_is_not_a_runtime_error() -> None:
    inst = _inst(["pkg/tests/test_mod.py::test_new"], ["pkg/tests/test_mod.py::test_old"])
    assert runtime_ceiling.classify(_row(PYTEST_P2P_ASSERTION), inst)[0] == "f2p_only"


def test_a_crash_in_code_the_patch_did_not_touch_is_elsewhere() -> None:
    log = SYMPY_P2P_CRASH.replace("/opt/repo/pkg/mod.py", "/opt/repo/pkg/other.py")
    assert runtime_ceiling.classify(_row(log), _inst(["test_new"], ["test_old"]))[0] == "p2p_runtime_elsewhere"


def test_the_command_prints_the_ceiling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text(json.dumps({
        "instance_id": "o__r-1", "repo": "o/r", "base_commit": "0" * 40, "problem_statement": "x",
        "version": "1.0", "FAIL_TO_PASS": json.dumps(["test_new"]), "PASS_TO_PASS": json.dumps(["test_old"])}) + "\n")
    preds = tmp_path / "preds.jsonl"
    rows = [_row(SYMPY_P2P_CRASH), {**_row(""), "failure_kind": "resolved", "system": "s2"}]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert runtime_ceiling.main(["--predictions", str(preds), "--dataset", str(dataset),
                                 "--static-tp", "0", "--static-fp", "0"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    # One positive, revealable: a perfect runtime column would catch it with no false positive.
    assert last == "ceiling_tp=1 ceiling_F1=1.000 needed_tp=1 positives=1"
    # With critic_bench's rows, only the rows they judged count, with the static phase's verdicts.
    critic = tmp_path / "critic.jsonl"
    critic.write_text(json.dumps({"system": "s", "instance_id": "o__r-1", "label": True, "ours": {"unsafe": False},
                                  "runtime": {"unsafe": True}}) + "\n")
    assert runtime_ceiling.main(["--predictions", str(preds), "--dataset", str(dataset),
                                 "--critic-rows", str(critic)]) == 0
    out = capsys.readouterr().out
    assert "runtime column, where it ran: 1 TP and 0 FP beyond the static phase" in out
    assert out.strip().splitlines()[-1] == "ceiling_tp=1 ceiling_F1=1.000 needed_tp=1 positives=1"


def test_no_positives_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps(_row("", kind="resolved")) + "\n")
    assert runtime_ceiling.main(["--predictions", str(preds), "--dataset", str(dataset)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
