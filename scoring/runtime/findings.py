"""Runtime errors the loop's own test run shows: evidence no static reading of a patch has.

A selected existing test that passed at the base commit and, with the patch, raises an exception
other than an assertion has hit a runtime error the patch introduced (or exposed). Where the
error counts is the scope (``regression.runtime_scope``):

- ``touched``: a frame of its traceback lies in a file the patch touched;
- ``source`` (the config's default; the functions' keyword default stays ``touched``): as
  ``touched``, or the innermost repository frame lies in non-test source of the repository,
  touched or not (a patch that changes what a helper returns crashes its untouched
  caller). A crash raised in test code (test files, test folders, ``conftest.py``), or with no
  repository frame at all (site-packages, the standard library), stays a regression in both.

A reproduction test that still fails with the patch by raising such an exception in the same
scope is runtime evidence too (``critic.repro_crashes``): the test should pass with the
fix, and the exception comes from the repository's code, not the test's (a crash in the test's own
code, or an assertion, stays a failing reproduction test). On django the hidden tests that define
the ``runtime_error`` label are new tests, which only a reproduction test can stand for.

It is reported like a static finding (source ``runtime``, the exception type as the rule,
``file:line in symbol`` and the line of code; in scope ``source`` also the touched frame the
exception passed through, if any), so the Coder gets REDO §G feedback for it; the Critic's verdict
becomes ``Unsafe``. A test that now fails an assertion, or raises outside the scope, stays a
regression (``tests/regression``).

Each regressed test's crash is first summarized (:func:`crash_summaries`) into what both scopes
need, so that a benchmark can save the summaries and rescore them in either scope later.
"""

from __future__ import annotations

from typing import Any, Literal

from fixgraph.localize import is_test_path
from fixgraph.state import Finding
from scoring.execution.choose_tests import is_test_file
from scoring.execution.outcomes import TestOutcome
from scoring.execution.specs import patch_files

Scope = Literal["touched", "source"]
SCOPES: tuple[Scope, ...] = ("touched", "source")

# What test frameworks raise to fail a test on purpose: a wrong result, not a crash.
NOT_RUNTIME = {"AssertionError", "Failed", "XPassed", "Skipped", "Exit", "OutcomeException", "DidNotRaise",
               "KeyboardInterrupt", "SystemExit", "Timeout", "TimeoutError"}
MAX_FINDINGS = 5


def is_test_code(path: str) -> bool:
    """A test module, a file under a test folder (xarray's ``tests/__init__.py`` helpers) or a
    ``conftest.py``: code whose crash says something about the test, not the library. The
    selection's test modules (``tests.py`` too) and the index's test paths, together."""
    return is_test_file(path) or is_test_path(path)


def _where(frame: dict[str, Any] | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    return {"file": str(frame.get("file", "")), "line": int(frame.get("line") or 0),
            "function": str(frame.get("function", "")), "source": str(frame.get("source", ""))[:200]}


def summarize(rec: dict[str, Any], touched: set[str]) -> dict[str, Any]:
    """What rescoring one regressed test's crash needs, in either scope: its test id, exception
    type and first message line, the innermost frame in non-test repository source (``frame``),
    whether the innermost repository frame is test code (``in_test``), and the innermost frame in
    a touched file (``touched``, None when the traceback has none)."""
    frames = [fr for fr in rec.get("frames") or [] if str(fr.get("file", ""))]
    source = [fr for fr in frames if str(fr["file"]).endswith(".py") and not is_test_code(str(fr["file"]))]
    in_touched = [fr for fr in frames if fr["file"] in touched]
    message = str(rec.get("message", "")).strip().splitlines()
    return {"test": str(rec.get("test", "")), "type": str(rec.get("type", "")),
            "message": message[0][:300] if message else "",
            "frame": _where(source[-1] if source else None),
            "in_test": bool(frames) and is_test_code(str(frames[-1]["file"])),
            "touched": _where(in_touched[-1] if in_touched else None)}


def _touched(patch: str) -> set[str]:
    """The non-test Python files ``patch`` touches."""
    return {f for f in patch_files(patch) if f.endswith(".py") and not is_test_file(f)}


def crash_summaries(outcome: TestOutcome, patch: str) -> list[dict[str, Any]]:
    """:func:`summarize` for every crash record of a regressed test."""
    touched = _touched(patch)
    return [summarize(rec, touched) for rec in outcome.regression_crashes]


def repro_summaries(outcome: TestOutcome, patch: str) -> list[dict[str, Any]]:
    """:func:`summarize` for every crash record of a reproduction test still failing with the
    patch, each marked ``repro``."""
    touched = _touched(patch)
    return [summarize(rec, touched) | {"repro": True} for rec in outcome.repro_crashes]


def evidence(outcome: TestOutcome, patch: str, repro: bool = True) -> list[dict[str, Any]]:
    """What the Critic reads as runtime evidence from one test outcome: every regressed test's crash
    (:func:`crash_summaries`) and, with ``repro`` (``critic.repro_crashes``), every crash of a
    reproduction test still failing (:func:`repro_summaries`); :func:`findings_of` places them."""
    return crash_summaries(outcome, patch) + (repro_summaries(outcome, patch) if repro else [])


def place(summary: dict[str, Any], scope: Scope) -> dict[str, Any] | None:
    """The frame a crash is reported at in ``scope``, None when it is not a runtime finding there."""
    if summary["type"] in NOT_RUNTIME:
        return None
    if summary.get("touched") is not None and (scope == "touched" or summary.get("in_test")):
        return summary["touched"]
    if scope == "source" and summary.get("frame") is not None and not summary.get("in_test"):
        return summary["frame"]
    return None


def unsafe_in(summaries: list[dict[str, Any]], scope: Scope) -> bool:
    """Whether the saved summaries of one patch make a runtime finding in ``scope``."""
    return any(place(s, scope) is not None for s in summaries)


def findings_of(summaries: list[dict[str, Any]], scope: Scope) -> list[Finding]:
    """One finding per place that raised (file, line, exception type), naming the first test
    that reached it and how many others did."""
    by_place: dict[tuple[str, int, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for s in summaries:
        frame = place(s, scope)
        if frame is not None:
            by_place.setdefault((frame["file"], frame["line"], s["type"]), []).append((s, frame))
    found: list[Finding] = []
    for (file, line, etype), hits in list(by_place.items())[:MAX_FINDINGS]:
        s, frame = hits[0]
        more = f" (and {len(hits) - 1} more tests)" if len(hits) > 1 else ""
        via = s.get("touched")
        # The Coder edits the touched file, so when the crash surfaced elsewhere, say where the
        # exception passed through the patched code as well.
        through = (f"; it passed through the patched {via['file']}:{via['line']} in {via['function']}: "
                   f"{via['source']}" if via is not None and via != frame else "")
        which = ("the reproduction test, which should pass with the fix" if s.get("repro")
                 else "which passed before the patch")
        found.append(Finding(
            source="runtime", rule=etype, file=file, line=line, symbol=frame["function"],
            severity="error", code=frame["source"],
            message=f"{etype}: {s['message']} -- raised in {s['test']}, {which}{more}{through}"))
    return found


def explained(summaries: list[dict[str, Any]], scope: Scope) -> set[str]:
    """The regressed tests whose crash :func:`findings_of` reports in ``scope``."""
    return {s["test"] for s in summaries if place(s, scope) is not None}


def crashed_tests(outcome: TestOutcome, patch: str, scope: Scope = "touched") -> set[str]:
    """The regressed tests that :func:`runtime_findings` explains."""
    return explained(crash_summaries(outcome, patch), scope)


def runtime_findings(outcome: TestOutcome, patch: str, scope: Scope = "touched") -> list[Finding]:
    """The runtime findings of one test outcome in ``scope`` (:func:`findings_of`)."""
    return findings_of(crash_summaries(outcome, patch), scope)
