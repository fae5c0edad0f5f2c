"""Static and LLM findings weighed against what the tests ran: no veto before evidence.

A finding of the static phase (pyright, pyflakes, the names check) or of the LLM check is a
suspicion of a runtime error. Only the findings that are sure without running (:func:`certain`:
syntax errors, names that exist nowhere, an import of a module the repository lacks, pyflakes'
compile-level errors) end the attempt before the tests; the others wait for the tests, which
trace the lines of the files they point at (``scoring.runtime.lines``), and each gets a status:

- ``confirmed``: a test that failed with the patch crashed with the exception the finding
  predicts (:data:`EXPECTED`) passing through the finding's line (or, for an LLM finding named by
  function, through that function): the patch is Unsafe;
- ``contradicted``: the tests executed the line (or the function) and no exception of the
  predicted type passed there: the runtime error did not happen where it was predicted;
- ``unconfirmed``: nothing either way: the tests never imported the file, never reached the line,
  were cut by their timeout, or wrote no trace. The finding goes to the Coder as a static
  suspicion; the verdict follows the tests;
- ``untested``: the tests could not run at all; the finding decides, as before this module.

Each weighed finding keeps its ``status`` and an ``evidence`` sentence in the record.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from fixgraph import astlock
from fixgraph.state import Finding
from scoring.runtime.lines import Lines, spec

# Findings that decide without running.
CERTAIN_RULES = frozenset({"syntax", "reportRelativeImport"})
CERTAIN_SOURCES = frozenset({"names", "pyflakes", "python"})
SUSPICION_SOURCES = frozenset({"pyright", "pyflakes", "names", "python", "llm"})

# The exception a static rule predicts (its dynamic counterpart); an LLM finding's rule is the type.
_TYPE_ERRORS = ("reportCallIssue", "reportArgumentType", "reportOptionalSubscript", "reportOptionalCall",
                "reportOptionalIterable", "reportOptionalContextManager", "reportOptionalOperand",
                "reportIndexIssue", "reportOperatorIssue", "reportAbstractUsage", "reportUnhashable",
                "reportNoOverloadImplementation")
EXPECTED: dict[str, frozenset[str]] = {
    **{r: frozenset({"TypeError"}) for r in _TYPE_ERRORS},
    "reportAttributeAccessIssue": frozenset({"AttributeError", "ImportError"}),
    "reportOptionalMemberAccess": frozenset({"AttributeError"}),
    "reportFunctionMemberAccess": frozenset({"AttributeError"}),
    "reportUndefinedVariable": frozenset({"NameError", "UnboundLocalError"}),
    "reportPossiblyUnboundVariable": frozenset({"UnboundLocalError", "NameError"}),
    "reportUnboundVariable": frozenset({"UnboundLocalError", "NameError"}),
    "UnknownAttribute": frozenset({"AttributeError"}),
    "UndefinedName": frozenset({"NameError"}),
    "UndefinedLocal": frozenset({"UnboundLocalError"}),
}


def trace_specs(findings: Iterable[Finding], texts: dict[str, str]) -> list[str]:
    """What the test runs must trace for ``findings``: each file with the lines that stand for them
    (``scoring.runtime.lines.spec``; a finding without a place traces its whole file)."""
    wanted: dict[str, set[int]] = {}
    whole: set[str] = set()
    for f in findings:
        file = f.get("file", "")
        if not file:
            continue
        where = span(f, texts.get(file, ""))
        wanted.setdefault(file, set()).update(where)
        if not where:
            whole.add(file)
    return [spec(file, () if file in whole else nums) for file, nums in sorted(wanted.items())]


def certain(f: Finding) -> bool:
    """Whether a finding is sure without running: it still vetoes before the tests."""
    return f.get("rule") in CERTAIN_RULES or f.get("source") in CERTAIN_SOURCES


def is_suspicion(f: Finding) -> bool:
    """A static or LLM finding the tests can weigh."""
    return f.get("source") in SUSPICION_SOURCES and not certain(f)


def expected(f: Finding) -> frozenset[str]:
    """The exception types that would make ``f`` true when its line runs (empty: any crash)."""
    rule = f.get("rule", "")
    if "Tuple size mismatch" in f.get("message", ""):
        return frozenset({"ValueError"})
    if rule in EXPECTED:
        return EXPECTED[rule]
    bare = rule.rsplit(".", 1)[-1]
    return frozenset({bare}) if bare.endswith(("Error", "Exception")) else frozenset()


def _types_match(types: Iterable[str], wanted: frozenset[str]) -> bool:
    names = {t.rsplit(".", 1)[-1] for t in types}
    return bool(names & wanted) if wanted else bool(names - {"AssertionError"})


def span(f: Finding, text: str) -> tuple[int, ...]:
    """The lines that stand for ``f``'s place in the patched ``text``: its line and the first line
    of the innermost statement holding it (a continuation line gets no line event), or the lines of
    the function it names when it has no line; () when neither is known."""
    line = int(f.get("line") or 0)
    try:
        with astlock.LOCK:
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return (line,) if line else ()
    if line:
        best: ast.stmt | None = None
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
        if best is None or isinstance(best, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return (line,)
        return tuple(sorted({line, best.lineno}))
    name = f.get("symbol", "").rsplit(".", 1)[-1]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name and node.body:
            return tuple(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))
    return ()


def _crash_through(records: Iterable[dict[str, Any]], file: str, lines: tuple[int, ...],
                   wanted: frozenset[str]) -> str:
    """The test among ``records`` whose crash predicted by ``wanted`` passed through ``lines`` of ``file``."""
    for rec in records:
        if not _types_match([str(rec.get("type", ""))], wanted):
            continue
        for fr in rec.get("frames") or []:
            if str(fr.get("file", "")) == file and int(fr.get("line") or 0) in lines:
                return str(rec.get("test") or rec.get("nodeid") or "a test")
    return ""


def weigh(findings: list[Finding], *, ran: bool, lines: Lines | None, crashes: list[dict[str, Any]],
          texts: dict[str, str], why_not: str = "") -> list[Finding]:
    """``findings`` (suspicions) with ``status`` and ``evidence`` set. ``ran``: some tests ran;
    ``lines``: what the patched runs executed; ``crashes``: crash records of the tests that failed
    with the patch; ``texts``: the patched files' text; ``why_not``: why the tests could not run."""
    out: list[Finding] = []
    for f in findings:
        g = Finding(**f)
        if not ran:
            g["status"], g["evidence"] = "untested", f"the tests could not run ({why_not or 'off'}): the finding decides"
            out.append(g)
            continue
        file = f.get("file", "")
        where = span(f, texts.get(file, ""))
        wanted = expected(f)
        test = _crash_through(crashes, file, where, wanted) if where else ""
        if test:
            g["status"], g["evidence"] = "confirmed", f"{test} crashed with {'/'.join(sorted(wanted)) or 'an exception'} there"
        elif lines is None or file not in lines.traced:
            g["status"] = "unconfirmed"
            g["evidence"] = ("the test runs were cut by their timeout" if lines is not None and lines.timed_out
                             else "no trace of the test runs")
        elif file not in lines.imported and not lines.executed.get(file):
            g["status"], g["evidence"] = "unconfirmed", "the tests never imported this file"
        elif not where or not set(where) & lines.executed.get(file, set()):
            g["status"], g["evidence"] = "unconfirmed", "the tests never reached this line"
        elif any(_types_match(lines.raised.get(file, {}).get(n, ()), wanted) for n in where):
            g["status"] = "unconfirmed"
            g["evidence"] = "the tests ran this line and the predicted exception passed there, caught"
        else:
            g["status"] = "contradicted"
            g["evidence"] = "the tests ran this line without " + ("/".join(sorted(wanted)) or "an exception")
        out.append(g)
    return out


def confirmed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.get("status") in ("confirmed", "untested")]


def summary(findings: Iterable[Finding]) -> str:
    """One line: how many suspicions the tests confirmed, contradicted, left unconfirmed."""
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.get("status", "")] = counts.get(f.get("status", ""), 0) + 1
    return "static suspicions: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
