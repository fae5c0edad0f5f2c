"""Runtime errors the loop's own test run shows: evidence no static reading of a patch has.

A selected existing test that passed at the base commit and, with the patch, raises an exception
other than an assertion, in a frame of a file the patch touched, has hit a runtime error the
patch introduced (or exposed) in that file. It is reported like a static finding (source
``runtime``, the exception type as the rule, ``file:line in symbol`` and the line of code), so the
Coder gets REDO §G feedback for it; the Critic's verdict becomes ``Unsafe``. A test that now fails
an assertion, or raises in code the patch did not touch, stays a regression (``tests/regression``).
"""

from __future__ import annotations

from typing import Any

from fixgraph.state import Finding
from scoring.selection import is_test_file
from scoring.specs import patch_files
from scoring.tests import TestOutcome

# What test frameworks raise to fail a test on purpose: a wrong result, not a crash.
NOT_RUNTIME = {"AssertionError", "Failed", "XPassed", "Skipped", "Exit", "OutcomeException", "DidNotRaise",
               "KeyboardInterrupt", "SystemExit", "Timeout", "TimeoutError"}
MAX_FINDINGS = 5


def _crashes(outcome: TestOutcome, patch: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(record, innermost frame in a touched source file) for each runtime crash of a regressed test."""
    touched = {f for f in patch_files(patch) if f.endswith(".py") and not is_test_file(f)}
    out = []
    for rec in outcome.regression_crashes:
        if str(rec.get("type", "")) in NOT_RUNTIME:
            continue
        frames = [fr for fr in rec.get("frames") or [] if fr.get("file") in touched]
        if frames:
            out.append((rec, frames[-1]))
    return out


def crashed_tests(outcome: TestOutcome, patch: str) -> set[str]:
    """The regressed tests that :func:`runtime_findings` explains."""
    return {str(rec["test"]) for rec, _ in _crashes(outcome, patch)}


def runtime_findings(outcome: TestOutcome, patch: str) -> list[Finding]:
    """One finding per place that raised (file, line, exception type), naming the first test
    that reached it and how many others did."""
    by_place: dict[tuple[str, int, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for rec, frame in _crashes(outcome, patch):
        by_place.setdefault((str(frame["file"]), int(frame.get("line") or 0), str(rec["type"])), []).append((rec, frame))
    found: list[Finding] = []
    for (file, line, etype), hits in list(by_place.items())[:MAX_FINDINGS]:
        rec, frame = hits[0]
        more = f" (and {len(hits) - 1} more tests)" if len(hits) > 1 else ""
        message = str(rec.get("message", "")).strip().splitlines()
        found.append(Finding(
            source="runtime", rule=etype, file=file, line=line, symbol=str(frame.get("function", "")),
            severity="error", code=str(frame.get("source", "")),
            message=f"{etype}: {message[0][:300] if message else ''} -- raised in {rec['test']}, "
                    f"which passed before the patch{more}"))
    return found
