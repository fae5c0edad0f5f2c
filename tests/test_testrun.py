"""The test runner on fixture repos with the local backend: real git, real pytest, real patches."""

from __future__ import annotations

from pathlib import Path

from eval.hidden import run_hidden
from scoring import fix_score
from scoring.tests import make_runner
from tests.testrun_helpers import CALC, apply_to, calc_instance, diff_for, local_settings

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
