"""The issue's own code, run again with the patch: runtime evidence that needs no test at all.

An issue often carries the code that shows the bug (``fixgraph.localize.snippets``), and
``scoring.runtime.issue_run`` already runs it at the base commit for localization. The Critic runs it
once more on the patched copy, in the same sandbox, and compares the two runs statement by
statement (the same snippets give the same statements, in the same order). A statement is
compared only where both runs reached it and neither was cut by its timer; an exception counts
only with a frame in the repository's non-test source (a ``NameError`` of the issue's own code,
or one raised in site-packages, says nothing about the patch). Three outcomes are findings:

- ``introduced``: the statement ran clean at the base, and with the patch it raises;
- ``changed``: it raised inside the repository at the base, and with the patch it raises another
  exception type that the issue's text does not name (an issue that asks for a ``ValueError``
  instead of a ``TypeError`` gets what it asked for);
- ``persists``: the issue's text names the exception the statement raised at the base, and with
  the patch it raises the same type with the same message: the crash the issue reports is still
  there, so the patch does not fix it.

Assertions (``NOT_RUNTIME``) and a statement newly cut by its timer (a busy machine cuts
statements too) are never findings. The findings are reported like the test run's runtime
findings (source ``runtime``, the exception type as the rule, the innermost non-test repository
frame), so the Coder gets REDO §G feedback, and the Critic's verdict becomes ``Unsafe``.

This rule was written before any patched run of a real agent's patch was measured
(docs/benchmarks/critic.md).

The same two runs are also a reproduction test (``repro.issue_code``, :func:`reproductions`): a
statement that raised, at the base, inside the repository's non-test source, an exception the
issue's text names is the reported crash, reproduced without an LLM; it failed before the patch, as
a reproduction test must. With the patch it passes when it runs clean, or raises another exception
the issue names (the one it asks for); it fails when it still raises the reported type, or anything
else. A statement the patched run did not reach, or cut by its timer, says nothing. The Critic adds
these statuses to the reproduction tests' (``scoring.execution.outcomes.own_outcome``), so they count in
``test_pass_rate``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from fixgraph.dataset import Task
from fixgraph.repo.workspace import Worktree
from fixgraph.state import Finding
from scoring.execution.specs import patch_files
from scoring.execution.testenv import SuiteRunner
from scoring.runtime.findings import NOT_RUNTIME, is_test_code
from scoring.runtime.issue_run import IssueTrace, TracedError, trace_issue
from scoring.static.patchinfo import added_raises

Kind = Literal["introduced", "changed", "persists"]
TIMEOUT = "StatementTimeout"
MAX_FINDINGS = 3
# Statements of the issue's code kept as reproduction tests: the first ones (an issue that shows
# dozens of crashing calls must not outweigh every other test, nor flood the Coder's prompt).
MAX_REPRODUCTIONS = 10
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _source_frames(err: TracedError) -> list[tuple[str, int, str]]:
    """The frames of ``err`` in the repository's non-test Python source, outermost first."""
    return [f for f in err.frames if f[0].endswith(".py") and not is_test_code(f[0])]


def _is_runtime(err: TracedError) -> bool:
    return err.type not in NOT_RUNTIME and err.type != TIMEOUT and not err.type.startswith("prelude:")


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return _ADDRESS.sub("0x?", lines[0].strip()) if lines else ""


def _named(etype: str, text: str) -> bool:
    """Whether the issue's text names the exception type (as a word: ``TypeError``, not ``MyTypeError``)."""
    bare = etype.rsplit(".", 1)[-1]
    return bool(bare) and re.search(rf"(?<![\w.]){re.escape(bare)}\b", text) is not None


def _by_statement(trace: IssueTrace) -> dict[int, TracedError]:
    # The tracer records a statement's final outcome once (its name retries are not recorded).
    return {e.statement: e for e in trace.errors if e.statement >= 0}


def asked_for(base: IssueTrace, patched: IssueTrace, issue_text: str, patch: str) -> int | None:
    """The first statement that ran clean at the base and, with the patch, raises an exception the
    issue's text names from a ``raise`` the patch added: the error the issue asks for
    (scikit-learn-11040: ``TypeError`` for a float ``n_neighbors``, where the base went on to a
    worse one). None when there is none. From there on the snippet's state is no longer the
    base's (the object the base went on with was never made), so later statements are not compared."""
    raises = added_raises(patch)
    if not raises or base.reason or patched.reason:
        return None
    before, after = _by_statement(base), _by_statement(patched)
    for statement in range(min(base.statements, patched.statements)):
        new = after.get(statement)
        if before.get(statement) is not None or new is None or not _is_runtime(new):
            continue
        frames = _source_frames(new)
        if frames and (frames[-1][0], frames[-1][1]) in raises and _named(new.type, issue_text):
            return statement
    return None


def compare(base: IssueTrace, patched: IssueTrace, issue_text: str, patch: str) -> list[dict[str, Any]]:
    """The statements whose outcome with the patch is a finding: one summary each (statement,
    kind, type, first message line, the innermost non-test repository frame, the innermost frame
    in a file the patch touched, and what the base raised there, if anything). Empty when either
    run did not run the snippets. Nothing from the statement :func:`asked_for` names on."""
    if base.reason or patched.reason:
        return []
    touched = {f for f in patch_files(patch) if f.endswith(".py")}
    before, after = _by_statement(base), _by_statement(patched)
    found: list[dict[str, Any]] = []
    stop = asked_for(base, patched, issue_text, patch)
    for statement in range(min(base.statements, patched.statements) if stop is None else stop):
        old, new = before.get(statement), after.get(statement)
        if new is None or not _is_runtime(new) or not _source_frames(new):
            continue
        if old is not None and old.type == TIMEOUT:
            continue
        if old is None:
            kind: Kind = "introduced"
        elif not _source_frames(old):
            continue  # the base run never reached the repository here: nothing to compare with
        elif old.type != new.type:
            if _named(new.type, issue_text):
                continue
            kind = "changed"
        elif _named(old.type, issue_text) and _first_line(old.message) == _first_line(new.message):
            kind = "persists"
        else:
            continue
        in_touched = [f for f in new.frames if f[0] in touched]
        found.append({
            "statement": statement, "kind": kind, "type": new.type, "message": _first_line(new.message)[:300],
            "frame": list(_source_frames(new)[-1]), "touched": list(in_touched[-1]) if in_touched else None,
            "base": {"type": old.type, "message": _first_line(old.message)[:300]} if old is not None else None,
        })
    return found


_ID_PREFIX = "issue code::statement "


def reproduction_id(statement: int) -> str:
    """The test id of the issue's code's statement ``statement`` (0-based) as a reproduction test."""
    return f"{_ID_PREFIX}{statement + 1}"


def is_reproduction_id(test_id: str) -> bool:
    """Whether ``test_id`` is a statement of the issue's code (:func:`reproduction_id`), not a test."""
    return test_id.startswith(_ID_PREFIX)


def _said(err: TracedError | None) -> str:
    if err is None:
        return "runs clean"
    frames = _source_frames(err)
    where = f" at {frames[-1][0]}:{frames[-1][1]} in {frames[-1][2]}" if frames else ""
    return f"raises {err.type}: {_first_line(err.message)[:200]}{where}"


def reported_crashes(base: IssueTrace, issue_text: str) -> list[int]:
    """The statements (0-based, in order) whose run at the base raised, inside the repository's
    non-test source, an exception the issue's text names: the crash the issue reports."""
    return [statement for statement, err in sorted(_by_statement(base).items())
            if err.type != TIMEOUT and not err.type.startswith("prelude:") and _source_frames(err)
            and _named(err.type, issue_text)]


def reproductions(base: IssueTrace, patched: IssueTrace, issue_text: str, patch: str = "") -> list[dict[str, str]]:
    """The issue's code as a reproduction test (module docstring): one entry per statement that
    raised the reported crash at the base and that the patched run reached, in order, each with its
    ``id`` (:func:`reproduction_id`), ``status`` after the patch (PASSED or FAILED) and ``detail``
    (what it raised at the base, and what it does with the patch). Empty when either run did not
    run the snippets."""
    if base.reason or patched.reason:
        return []
    before, after = _by_statement(base), _by_statement(patched)
    out: list[dict[str, str]] = []
    stop = asked_for(base, patched, issue_text, patch)
    for statement in reported_crashes(base, issue_text):
        old, new = before[statement], after.get(statement)
        if statement >= patched.statements or (new is not None and new.type == TIMEOUT):
            continue
        if stop is not None and statement > stop:
            break  # after the error the issue asks for: the snippet went on from another state
        if len(out) == MAX_REPRODUCTIONS:
            break
        fixed = new is None or (new.type != old.type and _named(new.type, issue_text))
        out.append({
            "id": reproduction_id(statement), "status": "PASSED" if fixed else "FAILED",
            "detail": f"statement {statement + 1} of the issue's code {_said(old)} at the base commit; "
                      f"with the patch it {_said(new)}"})
    return out


@dataclass
class Replay:
    """One replay: the base run (usually cached by the localization), the patched run,
    :func:`compare`'s summaries and the issue's code as a reproduction test
    (:func:`reproductions`); ``note`` is the record's one line."""

    base: IssueTrace
    patched: IssueTrace | None
    summaries: list[dict[str, Any]]
    seconds: float
    reproduced: list[dict[str, str]] = field(default_factory=list)

    @property
    def note(self) -> str:
        if self.patched is None or self.base.reason or self.patched.reason:
            why = self.base.reason or (self.patched.reason if self.patched is not None else "")
            return f"replay: not run ({why})"
        kinds = ", ".join(f"{s['kind']} {s['type']} at statement {s['statement'] + 1}" for s in self.summaries)
        passed = sum(r["status"] == "PASSED" for r in self.reproduced)
        return (f"replay: {min(self.base.statements, self.patched.statements)} statements of the issue's code "
                f"compared with the base" + (f"; {kinds}" if kinds else "; no new error")
                + (f"; the reported crash reproduced by {len(self.reproduced)}, {passed} passing with the patch"
                   if self.reproduced else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"note": self.note, "summaries": self.summaries, "seconds": round(self.seconds, 2),
                "ran": self.patched is not None and not self.base.reason and not self.patched.reason,
                "reproduced": self.reproduced}


def replay_issue(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, *, timeout_s: float = 60,
                 base: IssueTrace | None = None) -> Replay:
    """Run the issue's code with ``patch`` applied and compare it (:func:`compare`) with its run at
    the base commit: ``base`` when the caller has it (the localization's trace), else traced here
    (cached). ``wt`` is only read. Never raises for the code, the patch or the environment; a run
    that could not happen leaves ``summaries`` empty and says why in ``note``."""
    start = time.monotonic()
    if base is None:
        base = trace_issue(runner, task, wt, task.issue, timeout_s=timeout_s)
    if base.reason:
        return Replay(base, None, [], time.monotonic() - start)
    patched = trace_issue(runner, task, wt, task.issue, timeout_s=timeout_s, patch=patch)
    return Replay(base, patched, compare(base, patched, task.issue, patch), time.monotonic() - start,
                  reproductions(base, patched, task.issue, patch))


_WHY = {
    "introduced": "it ran without an error at the base commit",
    "changed": "at the base commit it raised {base} there",
    "persists": "the issue reports this exception, and the patch does not remove it",
}


def findings_of(summaries: list[dict[str, Any]]) -> list[Finding]:
    """The Critic's findings for :func:`compare`'s summaries, at most :data:`MAX_FINDINGS`."""
    found: list[Finding] = []
    for s in summaries[:MAX_FINDINGS]:
        file, line, function = s["frame"]
        why = _WHY[s["kind"]].format(base=(s.get("base") or {}).get("type", ""))
        via = s.get("touched")
        through = (f"; it passed through the patched {via[0]}:{via[1]} in {via[2]}"
                   if via is not None and list(via) != list(s["frame"]) else "")
        found.append(Finding(
            source="runtime", rule=s["type"], file=file, line=int(line), symbol=function, severity="error",
            message=f"{s['type']}: {s['message']} -- raised by statement {s['statement'] + 1} of the issue's "
                    f"code, run with the patch ({why}){through}"))
    return found
