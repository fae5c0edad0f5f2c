"""The evaluation side's access to an instance's hidden tests, for benchmarks under ``eval/``.

Benchmarks that grade the runner or a Critic against ground truth call these; the pipeline never
does (its own tests are ``scoring.execution.outcomes.own_outcome``).
"""

from __future__ import annotations

import ast
import posixpath
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from unidiff.patch import PatchSet

from agents.context import TaskContext
from agents.reproducer import reproducer
from eval.fixtures.oracle import oracle_script
from fixgraph.config import RunConfig
from fixgraph.dataset import Instance
from fixgraph.models.llm import LLM, Meter, RunMeter
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.publish import DiffPublisher
from fixgraph.records import RunStore
from fixgraph.repo.workspace import Worktree
from fixgraph.state import TaskState
from scoring.execution.choose_tests import is_test_file
from scoring.execution.outcomes import TestOutcome, as_listed, hidden_outcome, listed_among
from scoring.execution.specs import NON_TEST_EXTS, patch_files
from scoring.execution.testenv import PASSING, Suite, SuiteRunner, git, git_apply


def run_hidden(runner: SuiteRunner, inst: Instance, wt: Worktree, patch: str) -> TestOutcome:
    """The instance's FAIL_TO_PASS and PASS_TO_PASS tests before and after ``patch``."""
    return hidden_outcome(runner, inst.task(), inst.evaluation_data(), wt, patch)


# What a flag outside PASS_TO_PASS turns out to be once the fix's own patches are applied.
VERIFIED = "verified"  # passes with the gold patch, fails with the candidate: breakage the harness does not count
SHARED = "fails_with_gold"  # fails (or is gone) with the gold patch too: an intended or shared change
REWRITTEN = "passes_with_test_patch"  # the candidate passes the test patch's version: it changed what the fix changed
# The candidate fails the fix's target test (the harness counts it as unresolved, not as a regression),
TARGET = "fail_to_pass"  # and the gold patch fails the test's base version too: the fix changes what it asserts;
TARGET_KEPT = "fail_to_pass_base_kept"  # or the gold patch passes the base version: the candidate broke what the fix keeps
UNCHECKED = "unchecked"  # a run could not say (no environment, not reported by either run)


def gold_check(runner: SuiteRunner, inst: Instance, wt: Worktree, patch: str, tests: list[str],
               selected: list[str] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Evaluation side: the loop's flags ``tests`` (passed at the base, fail with ``patch``) run
    again with the instance's gold ``patch`` and with the candidate, each with ``test_patch``
    applied as the harness does. {"tests": {test: {"gold", "candidate", "verdict"}}, "seconds",
    "reason"}; a verdict is one of this module's VERIFIED, SHARED, REWRITTEN, TARGET, TARGET_KEPT,
    UNCHECKED. A FAIL_TO_PASS test the candidate fails is run a third time, the gold patch with the
    test's base version (``gold_base``), as the loop ran it: does the fix keep what it asserted?

    The runs take the flagged tests' files whole (sympy's runner takes no single test; a bare name
    is looked up in the files the loop selected, as the base commit has them)."""
    files = _files_of(inst, wt, tests, selected)
    out: dict[str, Any] = {"tests": {}, "seconds": 0.0, "reason": ""}
    if not files:
        out["reason"] = "no test file defines the flagged tests"
        out["tests"] = {t: {"gold": "MISSING", "candidate": "MISSING", "verdict": UNCHECKED} for t in tests}
        return out
    protected = tuple(dict.fromkeys([*files, *(f for f in patch_files(inst.test_patch) if f.endswith(".py"))]))
    suite = Suite(targets=tuple(files), protected=protected, extra_patch=inst.test_patch, timeout_s=timeout_s,
                  label="gold-check", finished_on_timeout=True)
    task = inst.task()
    gold = runner.run_suite(task, wt, inst.patch, suite)
    cand = runner.run_suite(task, wt, patch, suite)
    out["seconds"] = round(gold.seconds + cand.seconds, 1)
    out["reason"] = "; ".join(f"{name}: {run.error[:200]}" for name, run in (("gold", gold), ("candidate", cand))
                              if run.error)
    g, c = as_listed(gold.statuses, tests), as_listed(cand.statuses, tests)
    targets = set(listed_among(tests, inst.FAIL_TO_PASS))
    for t in tests:
        if gold.error or cand.error or (g[t] == "MISSING" and c[t] == "MISSING"):
            verdict = UNCHECKED
        elif g[t] not in PASSING:
            verdict = SHARED
        elif c[t] in PASSING:
            verdict = REWRITTEN
        else:
            verdict = TARGET if t in targets else VERIFIED
        out["tests"][t] = {"gold": g[t], "candidate": c[t], "verdict": verdict}
    aimed = [t for t, v in out["tests"].items() if v["verdict"] == TARGET]
    if aimed:
        files = _files_of(inst, wt, aimed, selected)
        base = runner.run_suite(task, wt, inst.patch, Suite(targets=tuple(files), protected=tuple(files),
                                                            timeout_s=timeout_s, label="gold-check",
                                                            finished_on_timeout=True))
        out["seconds"] = round(out["seconds"] + base.seconds, 1)
        for t, status in as_listed(base.statuses, aimed).items():
            out["tests"][t]["gold_base"] = status
            if status in PASSING:
                out["tests"][t]["verdict"] = TARGET_KEPT
    return out


def _files_of(inst: Instance, wt: Worktree, tests: list[str], selected: list[str] | None = None) -> list[str]:
    """The test files holding ``tests``: a node id's own file; for a bare name (sympy), the
    ``selected`` files (else the test patch's) that define it at the base commit."""
    files = [t.split("::", 1)[0] for t in tests if "::" in t]
    bare = {t.split("[", 1)[0] for t in tests if "::" not in t}
    if bare:
        for path in selected or [f for f in patch_files(inst.test_patch) if f.endswith(".py")]:
            proc = git(wt.path, "show", f"{inst.base_commit}:{path}")
            text = proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else ""
            if any(re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\b", text, re.M) for name in bare):
                files.append(path)
    return list(dict.fromkeys(files))


def test_file_from_test_patch(inst: Instance, wt: Worktree, only_changed: bool = True) -> dict[str, Any] | None:
    """The instance's own test file as its ``test_patch`` leaves it: the first of
    :func:`test_files_from_test_patch`, {"path", "content", "files", "other_files"}; None when the
    test patch has no Python test file."""
    drafts = test_files_from_test_patch(inst, wt, only_changed)
    return drafts[0] if drafts else None


def test_files_from_test_patch(inst: Instance, wt: Worktree, only_changed: bool = True) -> list[dict[str, Any]]:
    """Each test file of the instance's ``test_patch`` as the patch leaves it, the one holding the
    most FAIL_TO_PASS tests first: what a model that reproduces the issue would write, and would
    write next when one is refused. [] when the test patch has no Python test file.

    A module the patch creates or edits that is no test file (a management command, a models
    module) and holds no FAIL_TO_PASS test is not a candidate when a test file is: it is what a
    test needs, not a test (a FAIL_TO_PASS name that merely holds its stem says nothing). Each
    candidate is {"path", "content", "files", "other_files"}. ``only_changed``: keep, of the file's
    tests, those the test patch adds or edits (with every fixture and helper), as a reproduction
    test written for the issue would be; the file's other tests are the repository's, and some fail
    for reasons of their own. ``files``: the text files the test patch creates (data the test
    reads), as a reproduction test's data files; ``other_files``: the existing files it edits.
    """
    files = [f for f in patch_files(inst.test_patch) if f.endswith(".py") and not f.endswith(NON_TEST_EXTS)]
    named = {t.split("::", 1)[0] for t in inst.FAIL_TO_PASS if "::" in t}
    files = [f for f in files if is_test_file(f) or f in named] or files

    def hits(path: str) -> int:
        # A node id names its file; a django label its module (app.tests: every label holds
        # "tests"); a bare name (sympy's) perhaps the file's stem.
        p = Path(path)
        label = f"{p.parent.name}.{p.stem}"
        return sum(t.startswith(path + "::") if "::" in t else label in t or p.stem != "tests" and p.stem in t
                   for t in inst.FAIL_TO_PASS)

    ranked = sorted(files, key=lambda f: (-hits(f), files.index(f)))
    drafts = (_test_file_as_patched(inst, wt, path, only_changed) for path in ranked)
    return [d for d in drafts if d is not None]


def standin_drafts(inst: Instance, wt: Worktree) -> list[dict[str, Any]]:
    """The e2e stand-in's reproduction tests, in the order it drafts them: each test file of the
    test patch (:func:`test_files_from_test_patch`), then each one the base commit has again as a
    new file beside it. The kept tests alone in place of the whole file can break what the
    repository imports from it by name (django's backends list ``expressions.tests.FTimeDeltaTests``
    among their expected failures, and its runner stops when the class is gone); a model told so
    writes its test as a new file, as the Reproducer's prompt asks."""
    drafts = test_files_from_test_patch(inst, wt)
    again = []
    for draft in drafts:
        if git(wt.path, "cat-file", "-e", f"{inst.base_commit}:{draft['path']}").returncode:
            continue  # the test patch creates it: already a new file
        folder = posixpath.dirname(draft["path"])
        taken = {d["path"] for d in drafts} | {f["path"] for d in drafts for f in d["files"]}
        for n in range(1, 10):
            path = posixpath.join(folder, f"test_reproduction{n if n > 1 else ''}.py")
            if path not in taken and git(wt.path, "cat-file", "-e", f"{inst.base_commit}:{path}").returncode:
                again.append(draft | {"path": path})
                break
    return drafts + again


def _test_file_as_patched(inst: Instance, wt: Worktree, path: str, only_changed: bool) -> dict[str, Any] | None:
    """``path`` at the base commit with the test patch's hunks for it applied (None if they do not
    apply), with the patch's created files (``files``) and edited ones (``other_files``)."""
    scratch = Path(tempfile.mkdtemp(prefix="fixgraph-testfile-"))
    try:
        proc = git(wt.path, "show", f"{inst.base_commit}:{path}")
        target = scratch / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if proc.returncode == 0:
            target.write_bytes(proc.stdout)
        git(scratch, "init", "-q")
        one = _file_diff(inst.test_patch, path)
        if git_apply(scratch, one):
            return None
        content = target.read_text(encoding="utf-8", errors="replace")
        if only_changed:
            content = keep_tests(content, _added_lines(one))
        created = _created_files(inst.test_patch)
        return {"path": path, "content": content,
                "files": [{"path": p, "content": c} for p, c in created.items() if p != path],
                "other_files": [f for f in patch_files(inst.test_patch) if f != path and f not in created]}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def standin_repro(inst: Instance, wt: Worktree, cfg: RunConfig, store: RunStore,
                  tries: int | None = None) -> dict[str, Any]:
    """Evaluation side: what the real Reproducer node leaves in the graph's state (``repro``) when
    the test it writes is the stand-in, the instance's own test file (:func:`test_file_from_test_patch`),
    drafted by a scripted model: accepted only if it runs and fails at the base, by the Reproducer's
    own rules, in ``tries`` tries (default: the config's ``repro.max_tries``; the stand-in is the same
    draft each time). ``standin`` says what the test patch held besides the file (``other_files``,
    ``support_files``), and is empty when it has no Python test file; ``wt`` is left at the base."""
    own_test = test_file_from_test_patch(inst, wt)
    if own_test is None:
        return {"status": "none", "reason": "the test patch has no Python test file", "standin": {}}
    draft = oracle_script(inst, own_test)["ReproTestDraft"]
    model = ScriptedChatModel(script={"ReproTestDraft": draft})
    cfg_n = cfg.model_copy(update={"repro": cfg.repro.model_copy(update={"max_tries": tries or cfg.repro.max_tries})})
    llm = LLM(lambda role: model, Meter(cfg_n.budget, cfg_n.llm.prices, RunMeter(None)), 0)
    ctx = TaskContext(cfg=cfg_n, task=inst.task(), worktree=wt, llm=llm, publisher=DiffPublisher(store),
                      cache_dir=cfg_n.cache_dir.resolve())
    state = TaskState(instance_id=inst.instance_id, problem=ctx.task.issue, files_read=[], exploration={})
    out = reproducer(state, Runtime(context=ctx))
    repro = dict(out.get("repro") or {"status": "none", "reason": out.get("stop_reason") or "no reply"})
    wt.reset()
    repro["standin"] = {"other_files": own_test.get("other_files", []),
                        "support_files": [f["path"] for f in own_test.get("files", [])]}
    return repro


def keep_tests(content: str, changed: set[int]) -> str:
    """``content`` without the test functions and methods none of whose lines is in ``changed``
    (a class of tests left with none goes too, unless it derives from a class that keeps some
    or a class that stays derives from it); the whole file when none would be left."""
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return content

    def span(node: ast.AST) -> range:
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno, *(d.lineno for d in decorators)])  # type: ignore[attr-defined]
        return range(first, (node.end_lineno or node.lineno) + 1)  # type: ignore[attr-defined]

    def is_test(node: ast.AST) -> bool:
        return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")

    drop: list[range] = []
    kept = 0
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    # A mixin's kept tests run only in the classes that derive from it (django's SessionTestsMixin
    # -> DatabaseSessionTests(SessionTestsMixin, TestCase)): those stay, without tests of their own.
    live = {c.name for c in classes if any(is_test(m) and not changed.isdisjoint(span(m)) for m in c.body)}
    while grown := {c.name for c in classes if c.name not in live
                    and any(isinstance(b, ast.Name) and b.id in live for b in c.bases)}:
        live |= grown
    def tests_of(node: ast.ClassDef) -> tuple[list[ast.stmt], list[ast.stmt]]:
        methods = [m for m in node.body if is_test(m)]
        return methods, [m for m in methods if changed.isdisjoint(span(m))]

    gone_whole = {c.name for c in classes if c.name not in live and tests_of(c)[0]
                  and len(tests_of(c)[1]) == len(tests_of(c)[0]) and changed.isdisjoint(span(c))}
    # A class that stays needs its bases (Jinja2EmptyLabelTestCase(EmptyLabelTestCase)).
    while needed := {b.id for c in classes if c.name not in gone_whole
                     for b in c.bases if isinstance(b, ast.Name)} & gone_whole:
        gone_whole -= needed
    for node in tree.body:
        if is_test(node):
            if changed.isdisjoint(span(node)):
                drop.append(span(node))
            else:
                kept += 1
        elif isinstance(node, ast.ClassDef):
            methods, gone = tests_of(node)
            kept += len(methods) - len(gone)
            if node.name in gone_whole:
                drop.append(span(node))
            elif len(gone) < len(node.body):
                drop += [span(m) for m in gone]
            # else: an empty class body would not parse; such a class keeps its own tests
    if not kept:
        return content
    lines = content.splitlines(keepends=True)
    dropped = {n for r in drop for n in r}
    return "".join(line for number, line in enumerate(lines, 1) if number not in dropped)


def _added_lines(diff: str) -> set[int]:
    """Line numbers, in the new file, of the lines a one-file diff adds."""
    return {line.target_line_no for pf in PatchSet(diff) for hunk in pf for line in hunk
            if line.is_added and line.target_line_no is not None}


def _created_files(patch: str) -> dict[str, str]:
    """The text files a diff creates, with their content."""
    out: dict[str, str] = {}
    for pf in PatchSet(patch):
        if pf.is_added_file and not pf.is_binary_file:
            out[pf.path] = "".join(line.value for hunk in pf for line in hunk if line.is_added)
    return out


def _file_diff(patch: str, path: str) -> str:
    """The part of a multi-file diff that touches ``path``."""
    blocks = patch.split("diff --git ")
    keep = [b for b in blocks[1:] if b.split("\n", 1)[0].endswith(f" b/{path}")]
    return "".join("diff --git " + b for b in keep)


def tests_the_test_patch_edits(inst: Instance, wt: Worktree, tests: list[str]) -> list[str]:
    """Of ``tests``, those the instance's ``test_patch`` adds, rewrites or removes: a test its
    files do not define at the base, a change to a line of the test's function at the base
    (decorators included), or its file deleted. A fix that changes behaviour on purpose makes a
    rewritten test fail, and the harness runs the rewritten one instead, so a regression the loop
    finds there is not one the harness can see; a regression only in an added test is not one any
    existing test can show."""
    changed: dict[str, set[int]] = {}  # base-side line numbers each test file's hunks change
    deleted: set[str] = set()
    for pf in PatchSet(inst.test_patch):
        if pf.is_removed_file:
            deleted.add(pf.path)
        lines: set[int] = set()
        for hunk in pf:
            last = hunk.source_start - 1
            for line in hunk:
                if line.source_line_no is not None:
                    last = line.source_line_no
                    if line.is_removed:
                        lines.add(last)
                elif line.is_added:  # an insertion sits between two base lines: both are changed
                    lines.update((last, last + 1))
        changed[pf.path] = lines
    spans: dict[str, dict[str, list[range]]] = {}

    def spans_of(path: str) -> dict[str, list[range]]:
        if path not in spans:
            proc = git(wt.path, "show", f"{inst.base_commit}:{path}")
            found: dict[str, list[range]] = {}
            try:
                tree = ast.parse(proc.stdout.decode("utf-8", "replace")) if proc.returncode == 0 else None
            except SyntaxError:
                tree = None
            for node in ast.walk(tree) if tree is not None else []:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    found.setdefault(node.name, []).append(range(first, (node.end_lineno or node.lineno) + 1))
            spans[path] = found
        return spans[path]

    out = []
    for test in tests:
        if "::" in test:
            path, name = test.split("::", 1)[0], test.split("::")[-1]
            files = [path] if path in changed else []
        else:  # sympy's bare names: any file of the test patch that defines it
            path, name, files = "", test, list(changed)
        name = name.split("[", 1)[0].split(" ", 1)[0]
        # Not at the base, and the test patch defines it (a bare name may be another file's test).
        added = (bool(files) and not any(name in spans_of(f) for f in files)
                 and re.search(rf"^\+\s*(?:async\s+)?def {re.escape(name)}\b", inst.test_patch, re.M) is not None)
        if path in deleted or added or any(not changed[f].isdisjoint(r) for f in files
                                           for r in spans_of(f).get(name, [])):
            out.append(test)
    return out
