"""eval.make_outside: a SWE-bench-format row from a fix commit (base = its parent, the diff split into
patch and test_patch, FAIL_TO_PASS / PASS_TO_PASS from two runs in the inferred env), graded back by
eval.grade; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import grade, local_harness, make_outside
from eval.fixtures.repos import (
    BUGGY_LINE,
    FIXED_LINE,
    OPS_BUGGY,
    TEST_PATCH_ADDITION,
    TESTS_BASE,
    _diff,
    git_commit_all,
    make_calc_repo,
)
from eval.local_harness import Prediction, harness_report, parser_kind
from fixgraph.dataset import Instance
from scoring.execution.testenv import SuiteRun
from tests.helpers.testrun_helpers import pinned_pyproject

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_the_diff_splits_into_code_and_tests() -> None:
    code = _diff(OPS_BUGGY, OPS_BUGGY.replace(BUGGY_LINE, FIXED_LINE), "src/calc/ops.py")
    tests = _diff(TESTS_BASE, TESTS_BASE + TEST_PATCH_ADDITION, "tests/test_ops.py")
    conftest = _diff("", "import pytest\n", "conftest.py")
    module_test = _diff("", "def test_x():\n    pass\n", "calc/ops_test.py")
    patch, test_patch = make_outside.split_diff(code + tests + conftest + module_test)
    assert "src/calc/ops.py" in patch and "tests/" not in patch and "conftest" not in patch
    assert all(f in test_patch for f in ("tests/test_ops.py", "conftest.py", "calc/ops_test.py"))


def test_fail_to_pass_is_what_passes_only_with_the_patch() -> None:
    before = {"a": "FAILED", "b": "PASSED", "c": "PASSED", "e": "SKIPPED"}
    after = {"a": "PASSED", "b": "PASSED", "c": "FAILED", "d": "PASSED", "e": "SKIPPED"}
    assert make_outside.derive(before, after) == (["a", "d"], ["b"])


@pytest.mark.parametrize("text, says", [
    ("", "no commits listed"),
    ("acme/x 1234\n", ":1: expected 'owner/name <40-hex commit>'"),
    (f"# c\nacme/x {COMMIT}  # note\nacme {COMMIT}\n", ":3: expected"),
])
def test_a_bad_list_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str) -> None:
    (tmp_path / "list.txt").write_text(text)
    assert make_outside.main(["--repos", str(tmp_path), "--out", str(tmp_path / "o.jsonl"),
                              "--list", str(tmp_path / "list.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("eval.make_outside: error: ") and says in err and "\n" not in err
    assert not (tmp_path / "o.jsonl").exists()


def test_a_repository_without_a_mirror_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "list.txt").write_text(f"acme/x {COMMIT}\n")
    assert make_outside.main(["--repos", str(tmp_path), "--out", str(tmp_path / "o.jsonl"),
                              "--list", str(tmp_path / "list.txt")]) == 2
    assert "no mirror under" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()


@pytest.mark.slow
def test_a_fix_commit_becomes_a_row_whose_gold_patch_grades_resolved(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    mirrors = tmp_path / "mirrors"
    make_calc_repo(mirrors)
    repo = mirrors / "fixture+calc"
    (repo / "pyproject.toml").write_text(pinned_pyproject('[tool.setuptools]\npackages = ["calc"]\n'))
    git_commit_all(repo, "pin the Python")
    (repo / "calc" / "ops.py").write_text(OPS_BUGGY.replace(BUGGY_LINE, FIXED_LINE))
    (repo / "tests" / "test_ops.py").write_text(TESTS_BASE + TEST_PATCH_ADDITION)
    fix = git_commit_all(repo, "mean() is off by one\n\nIt subtracted one.")
    (tmp_path / "list.txt").write_text(f"fixture/calc {fix}\n")
    out, gold, cache = tmp_path / "rows.jsonl", tmp_path / "gold.jsonl", tmp_path / "cache"
    args = ["--repos", str(mirrors), "--out", str(out), "--list", str(tmp_path / "list.txt"), "--cache-dir", str(cache),
            "--gold", str(gold), "--timeout", "120"]
    assert make_outside.main(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "rows=1 of=1 repos=1"
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["FAIL_TO_PASS"] == ["tests/test_ops.py::test_mean"] and row["version"] == ""
    assert row["PASS_TO_PASS"] == ["tests/test_ops.py::test_add", "tests/test_ops.py::test_clamp"]
    assert "calc/ops.py" in row["patch"] and "tests/" not in row["patch"] and "test_mean" in row["test_patch"]
    assert row["problem_statement"].startswith("mean() is off by one") and row["instance_id"] == f"fixture__calc-{fix[:8]}"
    assert make_outside.main([*args, "--resume"]) == 0  # nothing made twice
    assert len(out.read_text().splitlines()) == 1 and capsys.readouterr().err == ""
    assert grade.main(["--predictions", str(gold), "--dataset", str(out), "--repos", str(mirrors), "--cache-dir",
                       str(cache), "--logs", str(tmp_path / "logs"), "--report-dir", str(tmp_path / "reports"),
                       "--timeout", "120", "--no-progress"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "resolved=1 unresolved=0 patch_failed=0 not_runnable=0 empty=0 of=1")


def test_a_coloured_log_of_an_inferred_env_is_graded_on_its_tests(tmp_path: Path) -> None:
    """humanize's pytest configuration asks for ``--color=yes``: the grade reads the tests, not the
    escape codes (swebench's parser alone finds no test and calls the patch not applied)."""
    mirrors = tmp_path / "mirrors"
    inst = Instance.model_validate({**make_calc_repo(mirrors), "version": ""})
    green = "\x1b[32mPASSED\x1b[0m"
    log = "\n".join([f"{green} tests/test_ops.py::test_mean", f"{green} tests/test_ops.py::test_add",
                     f"{green} tests/test_ops.py::test_clamp", "\x1b[32m==== 3 passed in 0.1s ====\x1b[0m"])
    run = SuiteRun({}, log, 0.1, env="inferred from the repository: python 3.12; tests: pytest -rA [pytest log]")
    pred = Prediction(inst.instance_id, "gold", inst.patch)
    report = harness_report(inst, pred, local_harness._harness_log(pred, run, "", False), kind=parser_kind(run))
    assert report["patch_successfully_applied"] and report["resolved"]
    assert parser_kind(SuiteRun({}, "", 0.0, env="swebench's install spec for a/b 1.0")) == ""
