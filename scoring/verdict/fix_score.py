"""fix_score exactly as the seed defines it, from the loop's own tests.

With tests that ran (the reproduction tests: the accepted LLM-written test's and the statements of
the issue's own code that raised its reported crash at the base, ``scoring.runtime.replay``; and the selected
existing tests):
    test_pass_rate = reproduction tests passing after / reproduction tests
    no_regression  = existing tests passing after / existing tests passing before (1.0 if none passed before)
    fix_score      = 0.5*test_pass_rate + 0.3*no_regression + 0.2*code_quality      kind "tests"
When only one of the two sets could run, the missing rate is the LLM's judgment of the patch
against the issue (0 without one), and the note says which:                    kind "partial"
When neither can run but an LLM judged the patch against the issue:
    fix_score      = 0.8*llm_score + 0.2*code_quality                              kind "semantic"
When neither is available: fix_score = 0.0, kind "none" (nothing says the patch works).

The semantic and partial kinds are the loop's retry signal, never ground truth. Under the
``oracle-tests`` ablation the two sets are the instance's hidden FAIL_TO_PASS and PASS_TO_PASS
tests (``tests_source`` "oracle"). "Passing" is swebench's grading: PASSED or XFAIL; a test missing
from the output counts as not passing.
"""

from __future__ import annotations

from collections.abc import Collection

from fixgraph.state import ScoreParts
from scoring.execution.outcomes import TestOutcome
from scoring.execution.testenv import PASSING

W_TESTS, W_REGRESSION, W_QUALITY = 0.5, 0.3, 0.2
W_LLM, W_LLM_QUALITY = 0.8, 0.2


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))


def test_pass_rate(outcome: TestOutcome) -> float:
    total = len(outcome.fail_to_pass)
    return sum(s in PASSING for s in outcome.fail_to_pass.values()) / total if total else 0.0


def no_regression(outcome: TestOutcome, leave_out: Collection[str] = ()) -> float:
    """The rate over the existing tests that passed at the base, but those in ``leave_out``."""
    passed_before = [t for t, s in outcome.pass_to_pass_before.items() if s in PASSING and t not in leave_out]
    if not passed_before:
        return 1.0
    still = sum(outcome.pass_to_pass_after.get(t) in PASSING for t in passed_before)
    return still / len(passed_before)


def needs_judgment(outcome: TestOutcome | None) -> bool:
    """Whether the LLM's judgment is needed: some rate cannot come from tests."""
    return outcome is None or not outcome.runnable or not (outcome.repro_ran and outcome.regression_ran)


def weighted(test_pass_rate: float, no_regression: float, code_quality: float) -> float:
    """fix_score where tests ran: ``0.5*test_pass_rate + 0.3*no_regression + 0.2*code_quality``."""
    return W_TESTS * test_pass_rate + W_REGRESSION * no_regression + W_QUALITY * code_quality


def compute(outcome: TestOutcome | None, code_quality: float, llm_score: float | None, *,
            leave_out: Collection[str] = (), why_left_out: str = "") -> ScoreParts:
    """The score parts; ``leave_out`` names existing tests kept out of ``no_regression`` (and
    ``why_left_out`` says why, in the note) yet still shown with their status."""
    quality = _clamp(code_quality)
    if outcome is not None and outcome.runnable and (outcome.repro_ran or outcome.regression_ran):
        tpr = test_pass_rate(outcome) if outcome.repro_ran else None
        nr = no_regression(outcome, leave_out) if outcome.regression_ran else None
        stand_in = _clamp(llm_score) if llm_score is not None else 0.0
        score = weighted(stand_in if tpr is None else tpr, stand_in if nr is None else nr, quality)
        notes = list(outcome.notes)
        if leave_out:
            names = sorted(leave_out)
            notes.append(f"{len(names)} existing tests {why_left_out or 'set aside'}; left out of no_regression: "
                         + ", ".join(names[:3]) + (" ..." if len(names) > 3 else ""))
        kind = "tests"
        if tpr is None or nr is None:
            kind = "partial"
            missing = "test_pass_rate" if tpr is None else "no_regression"
            by = f"the LLM's judgment ({stand_in:.2f})" if llm_score is not None else "0 (no LLM judgment)"
            notes.insert(0, f"{missing} from {by}: {outcome.reason}")
        return ScoreParts(
            fix_score=round(score, 6), kind=kind, test_pass_rate=tpr, no_regression=nr,
            code_quality=quality, llm_score=llm_score, tests_source=outcome.source,
            tests_run=len(outcome.fail_to_pass) + len(outcome.pass_to_pass_after),
            fail_to_pass=dict(outcome.fail_to_pass), pass_to_pass=dict(outcome.pass_to_pass_after),
            note="; ".join(notes),
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
