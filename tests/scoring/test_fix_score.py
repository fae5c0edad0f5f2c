"""fix_score as the seed defines it, its fallback, and code_quality."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.hidden import run_hidden
from fixgraph.state import PatchJudgment
from scoring.execution.outcomes import TestOutcome
from scoring.execution.runner import make_runner
from scoring.verdict import fix_score
from scoring.verdict.quality import code_quality
from tests.helpers.testrun_helpers import CALC, apply_to, calc_instance, diff_for, local_settings


def outcome(f2p: dict[str, str], before: dict[str, str], after: dict[str, str]) -> TestOutcome:
    return TestOutcome(runnable=True, reason="", fail_to_pass=f2p, pass_to_pass_before=before,
                       pass_to_pass_after=after)


def test_seed_formula_with_tests() -> None:
    out = outcome({"a": "PASSED", "b": "FAILED", "c": "XFAIL", "d": "MISSING"},
                  {"p1": "PASSED", "p2": "PASSED", "p3": "FAILED", "p4": "PASSED"},
                  {"p1": "PASSED", "p2": "ERROR", "p3": "PASSED", "p4": "PASSED"})
    parts = fix_score.compute(out, code_quality=0.6, llm_score=0.9)
    assert parts["kind"] == "tests"
    assert parts["test_pass_rate"] == 0.5  # PASSED and XFAIL of 4
    assert parts["no_regression"] == pytest.approx(2 / 3)  # p3 failed before: not counted
    assert parts["fix_score"] == pytest.approx(0.5 * 0.5 + 0.3 * (2 / 3) + 0.2 * 0.6)
    assert parts["llm_score"] == 0.9  # kept, though the tests decide
    assert parts["fail_to_pass"]["b"] == "FAILED" and parts["pass_to_pass"]["p2"] == "ERROR"


def test_no_regression_is_one_when_nothing_passed_before() -> None:
    out = outcome({"a": "PASSED"}, {"p": "FAILED"}, {"p": "FAILED"})
    assert fix_score.compute(out, 1.0, None)["no_regression"] == 1.0
    out = outcome({"a": "PASSED"}, {}, {})
    assert fix_score.compute(out, 1.0, None)["fix_score"] == 1.0


def test_semantic_fallback_and_none() -> None:
    not_run = TestOutcome(runnable=False, reason="nothing collected (ImportError)")
    sem = fix_score.compute(not_run, code_quality=0.5, llm_score=0.75)
    assert sem["kind"] == "semantic"
    assert sem["fix_score"] == pytest.approx(0.8 * 0.75 + 0.2 * 0.5)
    assert sem["test_pass_rate"] is None and sem["no_regression"] is None
    assert "nothing collected" in sem["note"]
    none = fix_score.compute(None, code_quality=0.5, llm_score=None)
    assert none["kind"] == "none" and none["fix_score"] == 0.0
    assert fix_score.compute(None, 2.0, 1.5)["fix_score"] == 1.0  # inputs clamped to [0, 1]


@pytest.mark.slow
def test_repo_where_nothing_is_collected_falls_back_to_the_llm(tmp_path: Path) -> None:
    from fixgraph.models.scripted import ScriptedChatModel

    # the package cannot be imported by its tests: nothing is collected
    broken = "import no_such_dependency_xyz\n\n\n" + CALC
    inst, wt, _ = calc_instance(tmp_path, files={"calc.py": broken})
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", broken, broken.replace("a - b", "a + b")))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert not out.runnable
    assert out.reason.startswith("nothing collected")
    assert "no_such_dependency_xyz" in out.reason
    model = ScriptedChatModel(script={"PatchJudgment": [{"score": 0.7, "reasoning": "adds instead of subtracting"}]})
    reply = model.with_structured_output(PatchJudgment, method="function_calling").invoke("judge")
    assert isinstance(reply, PatchJudgment)
    quality, _ = code_quality(wt, patch)
    parts = fix_score.compute(out, quality, reply.score)
    assert parts["kind"] == "semantic"
    assert parts["fix_score"] == pytest.approx(0.8 * 0.7 + 0.2 * quality)


def test_code_quality_of_a_small_clean_fix(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("a - b", "a + b")))
    score, detail = code_quality(wt, patch, gold_patch=patch)
    assert score == 1.0
    assert detail["new_lint_findings"] == 0 and detail["lines_changed"] == 2


def test_code_quality_counts_only_new_lint_findings(tmp_path: Path) -> None:
    dirty = "import os\n\n\n" + CALC  # an unused import already there before the patch
    inst, wt, _ = calc_instance(tmp_path, files={"calc.py": dirty})
    worse = dirty.replace("    return a - b", "    return a + b + undefined_name")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", dirty, worse))
    score, detail = code_quality(wt, patch)
    assert detail["new_lint_findings"] == 1  # F821 only; the old F401 is not the patch's
    assert "F821" in detail["lint_detail"]
    assert score == pytest.approx(0.5 * 0.75 + 0.25 + 0.25)


def test_code_quality_penalises_size_and_complexity_against_gold(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    gold = diff_for(tmp_path, "calc.py", CALC, CALC.replace("a - b", "a + b"))
    branches = "".join(f"    if a == {i}:\n        return {i} + b\n" for i in range(12))
    big = CALC.replace("    return a - b", branches + "    return a + b")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, big))
    score, detail = code_quality(wt, patch, gold_patch=gold)
    assert detail["branches_added"] == 12 and detail["branches_allowed"] == 3
    assert detail["complexity"] == pytest.approx(0.1)
    # 26 lines against a 2-line gold fix (reference at least 5): 1 - (26/5 - 2)/8
    assert detail["lines_changed"] == 26 and detail["size_ref"] == 5
    assert detail["size"] == pytest.approx(0.6)
    assert score == pytest.approx(0.5 + 0.25 * 0.1 + 0.25 * 0.6)
