"""fix_score exactly as the seed defines it.

With tests that ran:
    test_pass_rate = FAIL_TO_PASS passing after / FAIL_TO_PASS total
    no_regression  = PASS_TO_PASS passing after / PASS_TO_PASS passing before (1.0 if none passed before)
    fix_score      = 0.5*test_pass_rate + 0.3*no_regression + 0.2*code_quality      kind "tests"
When the tests cannot run but an LLM judged the patch against the issue:
    fix_score      = 0.8*llm_score + 0.2*code_quality                              kind "semantic"
When neither is available: fix_score = 0.0, kind "none" (nothing says the patch works).

"Passing" is swebench's grading: PASSED or XFAIL. A test missing from the output counts as not
passing.
"""

from __future__ import annotations

from fixgraph.state import ScoreParts
from scoring.tests import PASSING, TestOutcome

W_TESTS, W_REGRESSION, W_QUALITY = 0.5, 0.3, 0.2
W_LLM, W_LLM_QUALITY = 0.8, 0.2


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def test_pass_rate(outcome: TestOutcome) -> float:
    total = len(outcome.fail_to_pass)
    return sum(s in PASSING for s in outcome.fail_to_pass.values()) / total if total else 0.0


def no_regression(outcome: TestOutcome) -> float:
    passed_before = [t for t, s in outcome.pass_to_pass_before.items() if s in PASSING]
    if not passed_before:
        return 1.0
    still = sum(outcome.pass_to_pass_after.get(t) in PASSING for t in passed_before)
    return still / len(passed_before)


def compute(outcome: TestOutcome | None, code_quality: float, llm_score: float | None) -> ScoreParts:
    quality = _clamp(code_quality)
    if outcome is not None and outcome.runnable:
        tpr = test_pass_rate(outcome)
        nr = no_regression(outcome)
        score = W_TESTS * tpr + W_REGRESSION * nr + W_QUALITY * quality
        return ScoreParts(
            fix_score=round(score, 6), kind="tests", test_pass_rate=tpr, no_regression=nr,
            code_quality=quality, llm_score=llm_score,
            tests_run=len(outcome.fail_to_pass) + len(outcome.pass_to_pass_after),
            fail_to_pass=dict(outcome.fail_to_pass), pass_to_pass=dict(outcome.pass_to_pass_after),
            note="; ".join(outcome.notes),
        )
    why = outcome.reason if outcome is not None else "tests not run"
    if llm_score is not None:
        score = W_LLM * _clamp(llm_score) + W_LLM_QUALITY * quality
        return ScoreParts(fix_score=round(score, 6), kind="semantic", test_pass_rate=None,
                          no_regression=None, code_quality=quality, llm_score=_clamp(llm_score),
                          tests_run=0, note=f"semantic score: {why}")
    return ScoreParts(fix_score=0.0, kind="none", test_pass_rate=None, no_regression=None,
                      code_quality=quality, llm_score=None, tests_run=0,
                      note=f"no score: {why}; no LLM judgment")
