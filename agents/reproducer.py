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
from agents.common import messages, stops_cleanly
from fixgraph.context import TaskContext
from fixgraph.state import ReproTestDraft, TaskState, Usage, merge_usage
from fixgraph.workspace import PatchError
from scoring import selection
from scoring.specs import SpecsError, repo_specs
from scoring.testenv import PASSING, SuiteRun, owned_by
from scoring.tests import ReproTest, baseline, make_runner

# A failure of these kinds raised in the test file itself says the test is broken, not the code.
_BROKEN_TEST = {"NameError", "ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError",
                "UnboundLocalError"}
OUTPUT_CHARS = 2500
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
    if not selection.is_test_file(draft.path):
        return (f"{draft.path!r} is not a test file name the test command collects "
                "(name it test_<something>.py where the repository keeps its tests)")
    try:
        tree = ast.parse(draft.content)
    except SyntaxError as exc:
        return f"not valid Python: {exc.msg} (line {exc.lineno})"
    has_test = any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
                   or isinstance(n, ast.ClassDef) and n.name.startswith("Test") for n in ast.walk(tree))
    return "" if has_test else "the file defines no test function (def test_...)"


def test_names(content: str) -> set[str]:
    """Names of the test functions, methods and classes a test file defines."""
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def judge_run(run: SuiteRun, path: str, content: str = "") -> tuple[str, list[str]]:
    """("", failing ids) when the run reproduces the issue, else (why not, [])."""
    if run.statuses:
        names = test_names(content) if content else None
        run.statuses = {t: s for t, s in run.statuses.items() if owned_by(t, (path,), names)}
    if run.error:
        return f"it could not run: {run.error}", []
    if not run.statuses:
        why = "timed out" if run.timed_out else "no test was collected (an import or collection error?)"
        return f"it did not run: {why}", []
    if run.timed_out:
        # What was reported before the kill is not the whole file: "passes" would be a guess.
        return "it did not finish within repro.timeout_s: keep it small and fast", []
    failing = [t for t, s in run.statuses.items() if s not in PASSING and s != "SKIPPED"]
    if not failing:
        return "it passes on the unfixed code, so it does not reproduce the issue", []
    broken = []
    by_id = {str(r.get("nodeid")): r for r in run.crash_records}
    for tid in failing:
        rec = by_id.get(tid)
        frames = (rec or {}).get("frames") or []
        if rec and rec.get("type") in _BROKEN_TEST and frames and frames[-1].get("file") == path:
            broken.append(f"{tid}: {rec.get('type')}: {rec.get('message', '')}"[:300])
    if broken and len(broken) == len(failing):
        return "it fails because the test itself is broken, not the code: " + "; ".join(broken[:3]), []
    return "", [t for t in failing if not any(b.startswith(t + ":") for b in broken)]


def _test_layout(ctx: TaskContext, suspect_files: list[str]) -> tuple[list[str], dict[str, str] | None]:
    """Existing test files for the suspects' modules, and the start of one as a style example."""
    tracked = ctx.worktree.tracked_files()
    tests = [f for f in tracked if selection.is_test_file(f)]
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
            test_command=_command_text(ctx) + " <file>",
        )
        draft, delta = ctx.llm.structured("coder", "reproducer", ReproTestDraft, prompt)
        usage = merge_usage(usage, delta)
        problem = check_draft(draft, ctx)
        output = ""
        failing: list[str] = []
        run: SuiteRun | None = None
        if not problem:
            test = ReproTest(draft.path, draft.content, ())
            run = baseline(runner, ctx.task, wt, test.suite(settings.timeout_s))
            problem, failing = judge_run(run, draft.path, draft.content)
            output = run.log_tail(OUTPUT_CHARS)
        tries.append({"path": draft.path, "content": draft.content[:6000], "verdict": problem or "accepted",
                      "output": output})
        if not problem and run is not None:
            return {"usage": usage, "repro": {
                "status": "accepted", "path": draft.path, "content": draft.content, "failing": failing,
                "base_statuses": run.statuses, "base_output": output, "explanation": draft.explanation,
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
