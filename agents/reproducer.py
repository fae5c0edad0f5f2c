"""Reproducer: writes a test that reproduces the issue, and keeps it only if it fails at the base.

The LLM writes the test from the issue and the code the Explorer read, in the repository's own
test style and location. It runs on the base commit, alone, with the repository's test command in
the same sandboxed runner the Critic uses. A test that passes there does not reproduce the issue,
and one that cannot run (a collection or import error, a broken test) is not a test: the LLM is
told which, with the output, and tries again, up to ``repro.max_tries`` times. The accepted test
and the ids in it that failed are the task's reproduction tests; the Critic runs them after each
patch. Without one the task goes on, and its record and fix_score say so.
"""

from __future__ import annotations

import ast
from typing import Any

from langgraph.runtime import Runtime

from agents.coder import coder_files
from agents.common import execution_evidence, messages, stops_cleanly
from agents.context import TaskContext
from fixgraph.repo.datafiles import data_file_problem
from fixgraph.repo.workspace import PatchError
from fixgraph.state import ReproTestDraft, TaskState, Usage, merge_usage
from scoring.execution import choose_tests, django_layout
from scoring.execution.outcomes import ReproTest, baseline, internal_error_frames
from scoring.execution.runner import make_runner
from scoring.execution.specs import SpecsError, repo_specs
from scoring.execution.testenv import PASSING, SuiteRun, owned_by
from scoring.static.guard import check_new_files

# A failure of these kinds raised in the test file itself says the test is broken, not the code.
_BROKEN_TEST = {"NameError", "ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError",
                "UnboundLocalError"}
# A failure of these kinds, or with these words, says the test wanted the network, which test runs
# do not have: it fails at the base for that reason alone, and would fail after any fix.
_NETWORK_TYPES = {"ConnectionError", "ConnectionRefusedError", "NewConnectionError", "MaxRetryError",
                  "gaierror", "URLError", "ProxyError", "SSLError", "ConnectTimeout", "ReadTimeout"}
_NETWORK_WORDS = ("Name or service not known", "Temporary failure in name resolution", "Network is unreachable",
                  "Failed to establish a new connection", "nodename nor servname", "No address associated")
OUTPUT_CHARS = 2500
MAX_SUPPORT_FILES = 5
MAX_SUPPORT_CHARS = 50_000
EXAMPLE_LINES = 40
CODE_BUDGET = 12_000


def wanted(ctx: TaskContext) -> bool:
    cfg = ctx.cfg
    return cfg.repro.enabled and cfg.critic.enabled and cfg.critic.tests == "own"


def check_draft(draft: ReproTestDraft, ctx: TaskContext) -> str:
    """Why the draft is not a test file we can run ("" when it is)."""
    try:
        ctx.worktree.resolve(draft.path)
    except PatchError as exc:
        return str(exc)
    django = django_layout.is_django(ctx.task.repo, ctx.worktree.tracked_files())
    if django:
        problem = django_layout.check_test_path(draft.path, ctx.worktree.tracked_files())
        if problem:
            return problem
    elif not choose_tests.is_test_file(draft.path) and not choose_tests.matches_patterns(
            draft.path, choose_tests.python_files_patterns(ctx.worktree)):
        return (f"{draft.path!r} is not a test file name the test command collects "
                "(name it test_<something>.py where the repository keeps its tests)")
    try:
        tree = ast.parse(draft.content)
    except SyntaxError as exc:
        return f"not valid Python: {exc.msg} (line {exc.lineno})"
    if django and not django_layout.defines_test_case(tree):
        return ("django's runner runs unittest test cases only: define a class deriving from "
                "django.test.SimpleTestCase (or TestCase) with test_... methods")
    has_test = any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
                   or isinstance(n, ast.ClassDef) and n.name.startswith("Test") for n in ast.walk(tree))
    if not has_test:
        return "the file defines no test function (def test_...)"
    return check_support(draft, ctx)


def check_support(draft: ReproTestDraft, ctx: TaskContext) -> str:
    """Why the draft's data files cannot be written beside the test ("" when they can). Each must be
    new: a file the repository has is code or data under test, and rewriting it is a patch."""
    if len(draft.files) > MAX_SUPPORT_FILES:
        return f"{len(draft.files)} data files: at most {MAX_SUPPORT_FILES}"
    tracked = set(ctx.worktree.tracked_files()) if draft.files else set()
    seen = {draft.path}
    for f in draft.files:
        try:
            ctx.worktree.resolve(f.path)
        except PatchError as exc:
            return f"data file: {exc}"
        if f.path in tracked or f.path in seen:
            return f"data file {f.path!r} already exists: a data file must be a new file"
        if len(f.content) > MAX_SUPPORT_CHARS:
            return f"data file {f.path!r} is over {MAX_SUPPORT_CHARS} characters"
        problem = data_file_problem(draft.path, f.path)
        if problem:
            return problem
        seen.add(f.path)
    # Guarded as a patch would be: they run with the test and go into the pull request.
    flagged = [g for g in check_new_files([(f.path, f.content) for f in draft.files]) if g.get("rule") != "edits-tests"]
    if flagged:
        g = flagged[0]
        return f"data file {g.get('file')!r}: {g.get('message')} (the unsafe-patch guard's rule {g.get('rule')})"
    return ""


def test_names(content: str) -> set[str]:
    """Names of the test functions, methods and classes a test file defines."""
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def judge_run(run: SuiteRun, path: str, content: str = "") -> tuple[str, list[str]]:
    """("", failing ids) when the run reproduces the issue, else (why not, [])."""
    if any(django_layout.is_failed_import(t) for t in run.statuses):
        # django's runner could not import the label: refused with what it said.
        return (f"the runner could not import the label {django_layout.label_of(path)} "
                f"(tests/<app>/ must be an existing test app): {run.log_tail(600)}"), []
    if run.statuses:
        names = test_names(content) if content else None
        run.statuses = {t: s for t, s in run.statuses.items() if owned_by(t, (path,), names)}
    if run.error:
        return f"it could not run: {run.error}", []
    if run.timed_out:
        # What was reported before the kill is not the whole file: "passes" would be a guess.
        return "it timed out: it did not finish within repro.timeout_s (keep it small and fast)", []
    if [f for f in internal_error_frames(run.log, run.root) if not f.startswith(path + ":")]:
        # The test session itself crashed in the repository's code (the code under test is the
        # test runner, as in pytest's own issues): the file as a whole is the failing test.
        return "", [path]
    if not run.statuses:
        return "it did not run: no test was collected (an import or collection error?)", []
    failing = [t for t, s in run.statuses.items() if s not in PASSING and s != "SKIPPED"]
    if not failing:
        return "it passes on the unfixed code, so it does not reproduce the issue", []
    broken: dict[str, str] = {}
    by_id = {str(r.get("nodeid")): r for r in run.crash_records}
    for tid in failing:
        rec = by_id.get(tid) or {}
        frames = rec.get("frames") or []
        what = f"{tid}: {rec.get('type')}: {rec.get('message', '')}"[:300]
        if rec.get("type") in _BROKEN_TEST and frames and frames[-1].get("file") == path:
            broken[tid] = "the test itself is broken, not the code: " + what
        elif rec.get("type") in _NETWORK_TYPES or any(w in str(rec.get("message", "")) for w in _NETWORK_WORDS):
            broken[tid] = "it needs the network, and tests run without one (build the objects locally): " + what
    if broken and len(broken) == len(failing):
        return "it fails for a reason other than the issue: " + "; ".join(list(broken.values())[:3]), []
    return "", [t for t in failing if t not in broken]


def _test_layout(ctx: TaskContext, suspect_files: list[str]) -> tuple[list[str], dict[str, str] | None]:
    """Existing test files for the suspects' modules, and the start of one as a style example."""
    tracked = ctx.worktree.tracked_files()
    tests = [f for f in tracked if choose_tests.is_test_file(f)]
    stems = {f.rsplit("/", 1)[-1].removesuffix(".py") for f in suspect_files}
    near = [t for t in tests if any(t.rsplit("/", 1)[-1] in (f"test_{s}.py", f"{s}_test.py") for s in stems)]
    shown = (near or tests)[:8]
    example = None
    for path in shown:
        text = ctx.worktree.read(path)
        if text:
            example = {"path": path, "content": "\n".join(text.splitlines()[:EXAMPLE_LINES])}
            break
    return shown, example


@stops_cleanly("reproducer")
def reproducer(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    if state.get("repro") or not wanted(ctx):
        return {} if state.get("repro") else {"repro": {"status": "off"}}
    settings = ctx.cfg.repro
    wt = ctx.worktree
    wt.reset()
    runner = make_runner(ctx.cfg.tests, ctx.cache_dir)
    exploration = state.get("exploration", {})
    suspects = exploration.get("suspects", [])
    files = coder_files(wt, ctx.index(), state.get("files_read", []), suspects, CODE_BUDGET,
                        ctx.cfg.coder.window_lines)
    test_files, example = _test_layout(ctx, [s.get("file", "") for s in suspects] or state.get("files_read", []))
    tries: list[dict[str, Any]] = []
    usage: Usage = {}
    for number in range(1, settings.max_tries + 1):
        prompt = messages(
            "the Reproducer", "reproducer", repo=ctx.task.repo, problem=ctx.task.issue,
            confidence=exploration.get("confidence", "unknown"), learned=exploration.get("learned", ""),
            suspects=suspects, files=files, test_files=test_files, example=example, tries=tries,
            test_command=_command_text(ctx) + (" <app>.test_<x> (the label of tests/<app>/test_<x>.py)"
                                               if ctx.task.repo == django_layout.DJANGO else " <file>"),
            execution=execution_evidence(ctx),
        )
        draft, delta = ctx.llm.structured("coder", "reproducer", ReproTestDraft, prompt)
        usage = merge_usage(usage, delta)
        problem = check_draft(draft, ctx)
        output = ""
        failing: list[str] = []
        run: SuiteRun | None = None
        support = tuple((f.path, f.content) for f in draft.files)
        if not problem:
            test = ReproTest(draft.path, draft.content, (), support)
            run = baseline(runner, ctx.task, wt, test.suite(settings.timeout_s))
            problem, failing = judge_run(run, draft.path, draft.content)
            output = run.log_tail(OUTPUT_CHARS)
        tries.append({"path": draft.path, "content": draft.content[:6000], "verdict": problem or "accepted",
                      "output": output})
        if not problem and run is not None:
            # ReproTest.from_dict reads it back for the Critic.
            accepted = ReproTest(draft.path, draft.content, tuple(failing), support).to_dict()
            return {"usage": usage, "repro": {
                "status": "accepted", **accepted, "base_statuses": run.statuses, "base_output": output, "explanation": draft.explanation,
                "tries": number, "seconds": round(run.seconds, 1), "history": _history(tries)}}
        if run is not None and run.error.startswith("env could not be built"):
            break  # no later try can run either
    reason = tries[-1]["verdict"] if tries else "no try"
    return {"usage": usage, "repro": {"status": "none", "reason": reason, "tries": len(tries),
                                      "history": _history(tries)}}


def _command_text(ctx: TaskContext) -> str:
    try:
        spec = repo_specs(ctx.cache_dir, ctx.task.repo, ctx.task.version) if ctx.task.version else None
    except SpecsError:
        spec = None
    return str(spec["test_cmd"]) if spec else "python -m pytest -rA"


def _history(tries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the record keeps of each try: the test, the verdict and the output."""
    return [{"path": t["path"], "verdict": t["verdict"], "output": t["output"][-1000:], "content": t["content"]}
            for t in tries]
