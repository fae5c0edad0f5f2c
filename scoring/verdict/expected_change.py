"""Existing tests a fix is meant to break: an issue that asks for new behaviour makes the tests
asserting the old one fail, and a developer updates them with the fix.

The loop's regression check flags any selected test that passed at the base and fails with the
patch. On real agents' patches a third of those flags were tests the fix's own test patch
rewrites (docs/benchmarks/critic.md): xarray-5131's issue asks to drop the trailing space of
the groupby repr, and ``test_groupby_repr`` asserts it; sympy-16503, "Bad centering for Sum
pretty print", breaks ``test_pretty_sum``. The loop cannot read the test patch, but it has the
issue: a broken test that

- fails an **assertion** (the test says the result changed; an exception raised by the code is a
  crash, never expected: it stays a runtime finding or a regression), and
- is **named after the issue's subject**: at least two terms of its name are words of the
  issue's title (``test_pretty_sum``: *pretty*, *sum*),

is an expected behaviour change, when every test the patch breaks is one (a patch that also
breaks an unrelated test breaks more than the issue asks: then all stay regressions). The Critic
reports each as a warning (update this test with the fix) instead of a regression, and leaves it
out of ``no_regression``; ``eval.regression_bench`` does not count it as a flag. The conditions
and the two-term threshold were chosen on the false and true positives of sessions 5-7 of
``eval.regression_bench`` (AutoCodeRover run 1, docs/benchmarks/critic.md). There, the 12 assertion
failures with two shared terms are all tests the fix's test patch rewrites; with one term, 15 of
16 are, and the 16th is breakage the fix does not intend (sympy-14817's
``test_MatrixSymbol_printing`` against "Error pretty printing MatAdd").

Off by default (``regression.expected_changes``): on 62 rows no rule was chosen on it
cleared no false positive and dropped a true regression, xarray-4094, whose bug report
("to_unstacked_dataset broken for single-dim variables") names the tests that regress. A bug report
asks for the old behaviour to be fixed, not replaced; telling the two apart needs more than names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from fixgraph.state import Finding
from scoring.execution.outcomes import TestOutcome

# What a test raises to say "wrong result" (pytest's fail() and fnmatch_lines raise Failed).
ASSERTION_KINDS = frozenset({"AssertionError", "Failed"})
MIN_SHARED_TERMS = 2
MAX_FINDINGS = 10
# Words of bug reports and test names that say nothing about the subject.
_GENERIC = frozenset(
    "test tests testing issue issues bug bugs error errors fail fails failed failing failure wrong incorrect "
    "broken crash crashes problem problems fix fixes fixed does doesn not should with when the and for from "
    "into that this can cannot work works working using use used case cases check new old add support "
    "unexpected correct correctly properly behavior behaviour".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def issue_title(issue: str) -> str:
    """The first non-empty line of the issue (SWE-bench's problem statements start with the title)."""
    for line in issue.splitlines():
        if line.strip().lstrip("#").strip():
            return line.strip().lstrip("#").strip()
    return ""


def _words(text: str) -> set[str]:
    """Lower-case words of ``text``, whole (``datasetgroupby``) and split at case changes
    (``dataset``, ``group``, ``by``), generic words left out."""
    out: set[str] = set()
    for word in _WORD.findall(text):
        out.add(word.lower())
        out.update(part.lower() for part in _CAMEL.findall(word))
    return {w for w in out if len(w) >= 3 and not w.isdigit() and w not in _GENERIC}


def name_terms(test_id: str) -> set[str]:
    """The terms of a test's own name: the last part of its id, without parameters or ``test``."""
    name = re.split(r"::|:", test_id)[-1].split("[", 1)[0]
    return {w for part in name.split("_") for w in _words(part)}


def _matches(term: str, word: str) -> bool:
    # "repr" names "representation", "log" "logging", "groupby" the "DatasetGroupBy" of a title.
    return term == word or word.startswith(term) or (len(term) >= 4 and term in word) or (
        len(word) >= 4 and term.startswith(word))


def shared_terms(test_id: str, issue: str, repo: str = "") -> list[str]:
    """The terms of the test's name that are words of the issue's title (not of ``repo``'s name)."""
    title = _words(issue_title(issue)) - _words(repo.replace("/", " ").replace("-", " "))
    return sorted(t for t in name_terms(test_id) if any(_matches(t, w) for w in title))


def expected_changes(broken: Iterable[str], kinds: Mapping[str, str], issue: str,
                     repo: str = "") -> dict[str, list[str]]:
    """The ``broken`` tests (passed at the base, fail with the patch) read as expected behaviour
    changes: test -> the title's terms it shares. Each must fail an assertion (``kinds``: test ->
    exception type; an unknown kind never counts) and be named after the issue's subject. All or
    nothing: a patch that also breaks any other test breaks more than the issue asks, and then
    every broken test stays a regression. ``repo``'s name is no subject (``requests`` in
    ``test_requests_are_updated``)."""
    broken = list(broken)
    out: dict[str, list[str]] = {}
    for test in broken:
        if kinds.get(test, "") not in ASSERTION_KINDS:
            return {}
        shared = shared_terms(test, issue, repo)
        if len(shared) < MIN_SHARED_TERMS:
            return {}
        out[test] = shared
    return out


def failure_kinds(outcome: TestOutcome) -> dict[str, str]:
    """What each broken test raised, where a crash record says ("" otherwise)."""
    return {str(c.get("test")): str(c.get("type", "")) for c in outcome.regression_crashes}


def of_outcome(outcome: TestOutcome, issue: str, repo: str = "") -> dict[str, list[str]]:
    """The expected behaviour changes among the regressions of ``outcome``."""
    return expected_changes(outcome.broken(), failure_kinds(outcome), issue, repo)


WHY = "assert what the issue asks to change"
"""How ``fix_score.compute``'s note says why the expected changes are left out of ``no_regression``."""


def findings(outcome: TestOutcome, expected: Mapping[str, list[str]]) -> list[Finding]:
    """A warning per expected change: the PR should update the test, the Coder need not undo it."""
    said = {str(c.get("test")): str(c.get("message", "")).strip() for c in outcome.regression_crashes}
    out = []
    for test, terms in list(expected.items())[:MAX_FINDINGS]:
        first = said.get(test, "").splitlines()[:1]
        out.append(Finding(
            source="tests", rule="expected_change", severity="warning",
            message=f"{test} likely asserts what the issue asks to change (named after its subject: "
                    f"{', '.join(terms)}): update it with the fix; it passed before the patch and now fails an "
                    "assertion" + (f" ({first[0][:200]})" if first else "")))
    return out
