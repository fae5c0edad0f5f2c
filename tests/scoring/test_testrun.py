"""The test runner on fixture repos with the local backend: real git, real pytest, real patches."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.hidden import run_hidden
from scoring.execution.runner import make_runner
from scoring.verdict import fix_score
from tests.helpers.testrun_helpers import CALC, apply_to, calc_instance, diff_for, local_settings

pytestmark = pytest.mark.slow

FIXED = CALC.replace("return a - b", "return a + b")
BREAKS_ONE = FIXED.replace("    return a * b", "    if a == 3:\n        return 0\n    return a * b")


def test_fixing_patch_passes_fail_to_pass(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    runner = make_runner(local_settings(), tmp_path / "cache")
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, out.reason
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert set(out.pass_to_pass_after.values()) == {"PASSED"}
    parts = fix_score.compute(out, code_quality=1.0, llm_score=None)
    assert parts["kind"] == "tests"
    assert parts["test_pass_rate"] == 1.0
    assert parts["no_regression"] == 1.0
    assert parts["fix_score"] == 1.0
    # the task's worktree is left as the Coder left it
    assert wt.read("calc.py") == FIXED
    assert not wt.exists("tests/__pycache__/x")


def test_patch_breaking_one_of_ten_passing_tests(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, BREAKS_ONE))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable, out.reason
    assert out.pass_to_pass_before["tests/test_calc.py::test_mul_3"] == "PASSED"
    assert out.pass_to_pass_after["tests/test_calc.py::test_mul_3"] == "FAILED"
    parts = fix_score.compute(out, code_quality=0.5, llm_score=None)
    assert parts["test_pass_rate"] == 1.0
    assert abs(parts["no_regression"] - 0.9) < 1e-9
    assert abs(parts["fix_score"] - (0.5 + 0.3 * 0.9 + 0.2 * 0.5)) < 1e-9


def test_empty_patch_fails_fail_to_pass(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, "")
    assert out.runnable
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "FAILED"}
    assert fix_score.compute(out, 1.0, None)["test_pass_rate"] == 0.0


def test_an_id_the_dataset_lists_cut_at_a_space_reads_the_status_of_the_test_it_names(tmp_path: Path) -> None:
    # SWE-bench's lists hold ``test_pair[x,`` for the test pytest reports as ``test_pair[x, y]``
    # (its old parser split at spaces); read as missing, a patch the harness resolved would fail.
    pairs = ('\n\nimport pytest\n\n\n@pytest.mark.parametrize("pair", ["x, y", "a, b"])\n'
             'def test_pair(pair):\n    assert calc.mul(2, 3) == 6 or pair == "a, b"\n')
    inst, wt, _ = calc_instance(tmp_path, extra_tests=pairs)
    cut = ["tests/test_calc.py::test_pair[x,", "tests/test_calc.py::test_pair[a,"]
    inst = inst.model_copy(update={"PASS_TO_PASS": [*inst.PASS_TO_PASS, *cut]})
    breaks_mul = CALC.replace("return a * b", "return a * b + 1")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, breaks_mul.replace("return a - b", "return a + b")))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable, out.reason
    assert {t: out.pass_to_pass_before[t] for t in cut} == {t: "PASSED" for t in cut}
    # The patch breaks mul: the first id fails, the second passes whatever mul does.
    assert {t: out.pass_to_pass_after[t] for t in cut} == {cut[0]: "FAILED", cut[1]: "PASSED"}
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
