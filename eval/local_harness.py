"""One prediction graded here, as SWE-bench's harness grades it, without Docker: the evaluation side.

A fresh copy of the instance's base commit; the prediction applied as the harness applies it
(``git apply``, then GNU ``patch --fuzz``, after the spec's ``pre_install`` edits when the patch
touches a file they name); the prediction's edits to the test patch's files undone and the
``test_patch`` applied; the test files of the test patch run by the repository's test command in
this machine's environment for the (repo, version) (``scoring.execution.envs``); the log written
in the harness's shape and graded by swebench's own ``get_eval_report`` (its log parser, its
FAIL_TO_PASS/PASS_TO_PASS rules). Every report says it is ``GRADER``'s, not the official harness's.

The same tests also run without the prediction (cached per instance): the listed tests that run
shows failing for want of the internet (``scoring.execution.offline_tests``) are left out of
FAIL_TO_PASS and PASS_TO_PASS before grading, for every prediction of the instance alike, and
named with the reason in ``grade.json`` and ``report.json`` (``not_runnable_here``); so are, on
this machine's builds, PASS_TO_PASS tests that do not pass without it (a tool the harness's image
has and this machine lacks), and matplotlib's image comparisons against baselines rendered with
another FreeType that do not pass without it (``scoring.execution.image_tests``), as the loop's own
runs set them aside.

A grade is one of ``RESOLVED``, ``UNRESOLVED``, ``PATCH_FAILED`` (as the harness counts them) or
``NOT_RUNNABLE``: the tests could not run here (no environment, no copy of the commit, the test
patch does not apply, a timeout, none of the instance's tests reported with or without the
patch, every FAIL_TO_PASS test set aside). A not-runnable grade is never counted as resolved or unresolved.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import RepoCache, WorkspaceError, Worktree
from scoring.execution.harness import harness_apply_error, pre_install_for
from scoring.execution.outcomes import baseline, not_runnable_here, not_runnable_reason, set_aside_notes
from scoring.execution.specs import ANSI, NON_TEST_EXTS, log_parser, patch_files
from scoring.execution.testenv import Suite, SuiteRun, SuiteRunner, git_apply

RESOLVED, UNRESOLVED, PATCH_FAILED, NOT_RUNNABLE = "resolved", "unresolved", "patch_failed", "not_runnable"
HARNESS_TIMEOUT_S = 1800.0  # swebench's run_evaluation default --timeout

# swebench's log markers (swebench.harness.constants), written into the log as its eval script does.
_APPLY_FAIL, _APPLY_PASS = ">>>>> Patch Apply Failed", ">>>>> Applied Patch"
_START, _END, _TIMEOUT = ">>>>> Start Test Output", ">>>>> End Test Output", ">>>>> Tests Timed Out"


def grader_label(backend: str) -> str:
    return f"local ({backend}), not the official harness"


@dataclass
class Prediction:
    instance_id: str
    model: str
    patch: str

    def as_harness(self) -> dict[str, str]:
        return {"instance_id": self.instance_id, "model_name_or_path": self.model, "model_patch": self.patch}


@dataclass
class Graded:
    """What grading one prediction found. ``report`` is the harness's report.json entry."""

    status: str
    reason: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    timed_out: bool = False
    # Listed tests that cannot run here (scoring.execution.offline_tests), with the reason: left out
    # of ``report``'s FAIL_TO_PASS and PASS_TO_PASS, counted neither as passes nor as failures.
    not_runnable_here: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "seconds": round(self.seconds, 1),
                "notes": self.notes, "timed_out": self.timed_out, "not_runnable_here": self.not_runnable_here}


def patch_notes(patch: str) -> list[str]:
    """What about a patch's text the harness takes as is but a reader should know."""
    notes = []
    if "\r\n" in patch:
        notes.append("the patch has CRLF line endings (applied as is, as the harness does)")
    if re.search(r"^(GIT binary patch|Binary files .* differ)$", patch, re.M):
        notes.append("the patch has binary hunks (applied as is, as the harness does)")
    return notes


def eval_suite(inst: Instance) -> Suite:
    """The harness's test run: the test patch's test files, after the prediction's edits to every
    file of the test patch are undone (its eval script checks them out at the base commit)."""
    files = patch_files(inst.test_patch)
    targets = [f for f in files if not f.endswith(NON_TEST_EXTS)]
    return Suite(targets=tuple(targets), protected=tuple(files), extra_patch=inst.test_patch, label="grade")


def parser_kind(run: SuiteRun | None) -> str:
    """The log parser an inferred env's run is read with ("pytest", "unittest"; "" for a spec's env:
    swebench's parser for the repository), as its one-line description says it."""
    if run is None or not run.env.startswith("inferred"):
        return ""
    return "unittest" if "[unittest log]" in run.env else "pytest"


def _readable_log(run: SuiteRun) -> str:
    """``run``'s log as its parser reads it. An inferred env runs the repository's own pytest
    configuration, which may ask for colour (humanize's ``--color=yes``): swebench's parser reads no
    line with escape codes in it."""
    return ANSI.sub("", run.log) if parser_kind(run) else run.log


def _harness_log(pred: Prediction, run: SuiteRun | None, apply_error: str, timed_out: bool) -> str:
    head = [f"# grader: {grader_label(run.backend if run else 'venv')}", f"# instance: {pred.instance_id}"]
    if apply_error:
        return "\n".join([*head, f"{_APPLY_FAIL}:\n{apply_error}", ""])
    assert run is not None
    body = [*head, f"{_APPLY_PASS}:", _START, _readable_log(run).rstrip("\n"), _END]
    if timed_out:
        body.append(_TIMEOUT)
    return "\n".join(body) + "\n"


def harness_report(inst: Instance, pred: Prediction, log: str, set_aside: Iterable[str] = (),
                   kind: str = "") -> dict[str, Any]:
    """swebench's own report (``get_eval_report``) for ``log``: its report.json entry. The tests
    ``set_aside`` (not runnable here) are left out of its FAIL_TO_PASS and PASS_TO_PASS; ``kind``: an
    inferred env's parser (:func:`parser_kind`)."""
    from swebench.harness.grading import get_eval_report  # type: ignore[import-untyped]
    from swebench.types import TestSpec  # type: ignore[import-untyped]

    aside = set(set_aside)
    spec = TestSpec(instance_id=inst.instance_id, image="", eval_script_list=[], repo=inst.repo,
                    version=inst.version or "",
                    FAIL_TO_PASS=[t for t in inst.FAIL_TO_PASS if t not in aside],
                    PASS_TO_PASS=[t for t in inst.PASS_TO_PASS if t not in aside],
                    log_parser=log_parser(inst.repo, kind).__name__, eval_type="pass_and_fail")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as fh:
        fh.write(log)
        fh.flush()
        report = get_eval_report(spec, pred.as_harness(), fh.name, include_tests_status=True)
    return dict(report[inst.instance_id])


def grade(inst: Instance, pred: Prediction, cache: RepoCache, runner: SuiteRunner, settings: TestSettings,
          cache_dir: Path, key: str) -> Graded:
    """Grade ``pred`` against ``inst`` (see the module's docstring). ``key`` names its worktree."""
    start = time.monotonic()
    notes = patch_notes(pred.patch)
    try:
        wt = cache.worktree(inst.repo, inst.base_commit, key)
    except WorkspaceError as exc:
        return Graded(NOT_RUNNABLE, f"no checkout: {exc}", notes=notes)
    except git.GitCommandError as exc:
        detail = [ln for ln in str(exc.stderr or "").strip().splitlines() if ln.strip()]
        return Graded(NOT_RUNNABLE, f"cannot check out the base commit: {(detail or ['git failed'])[-1]}",
                      notes=notes)
    try:
        out = _grade_in(inst, pred, wt, runner, settings, cache_dir)
    finally:
        cache.remove_worktree(inst.repo, wt)
    out.notes = notes + out.notes
    out.seconds = time.monotonic() - start
    return out


def _grade_in(inst: Instance, pred: Prediction, wt: Worktree, runner: SuiteRunner, settings: TestSettings,
              cache_dir: Path) -> Graded:
    task = inst.task()
    err = harness_apply_error(task, wt, pred.patch, pre_install_for(task, cache_dir), settings)
    err = err or git_apply(wt.path, pred.patch, check_only=True)
    if err:
        log = _harness_log(pred, None, err, False)
        return Graded(PATCH_FAILED, err, harness_report(inst, pred, log), log)
    suite = eval_suite(inst)
    run = runner.run_suite(task, wt, pred.patch, suite)
    if any(n.startswith("candidate patch did not apply") for n in run.notes):
        log = _harness_log(pred, None, run.notes[0], False)
        return Graded(PATCH_FAILED, run.notes[0], harness_report(inst, pred, log), log)
    if run.error:
        return Graded(NOT_RUNNABLE, run.error, log=run.log_tail(), notes=run.notes)
    log = _harness_log(pred, run, "", run.timed_out)
    if run.timed_out:
        return Graded(NOT_RUNNABLE, f"the tests timed out after {run.timeout_s:g}s",
                      harness_report(inst, pred, log, kind=parser_kind(run)),
                      log, notes=run.notes, timed_out=True)
    # The run without the patch (cached per instance, the same for every prediction) says what
    # cannot match here, whatever the prediction does (tests.not_runnable_here, as in the loop's
    # own runs): tests failing for want of the internet, PASS_TO_PASS tests not passing at all, and
    # image comparisons that do not pass against this build's FreeType.
    base = baseline(runner, task, wt, suite)
    notes = list(run.notes)
    aside = not_runnable_here(inst.repo, run.backend, [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS], wt.path,
                              inst.test_patch, None if base.error else base, inst.PASS_TO_PASS)
    if base.error:
        notes.append(f"the run without the patch could not run ({base.error[:200]}): no test set aside")
    notes += set_aside_notes(aside)
    kind = parser_kind(run)
    report = harness_report(inst, pred, log, aside, kind)
    if aside:
        report["not_runnable_here"] = aside
    listed = set(inst.FAIL_TO_PASS) | set(inst.PASS_TO_PASS)
    statuses = dict(log_parser(inst.repo, kind)(_readable_log(run), None)) if listed else {}
    if listed and not _any_reported(listed, statuses):
        # None of the instance's tests reported: the patch broke collection, or nothing runs here.
        if base.error or not _any_reported(listed, base.statuses):
            why = base.error or "none of the instance's tests is reported with or without the patch"
            return Graded(NOT_RUNNABLE, why, report, log, notes=notes, not_runnable_here=aside)
    if inst.FAIL_TO_PASS and all(t in aside for t in inst.FAIL_TO_PASS):
        return Graded(NOT_RUNNABLE, not_runnable_reason(aside, inst.FAIL_TO_PASS), report, log, notes=notes,
                      not_runnable_here=aside)
    return Graded(RESOLVED if report.get("resolved") else UNRESOLVED, "", report, log, notes=notes,
                  not_runnable_here=aside)


def _any_reported(listed: set[str], statuses: dict[str, str]) -> bool:
    heads = {t.split("[", 1)[0] for t in listed}
    return any(t in listed or t.split("[", 1)[0] in heads for t in statuses)
