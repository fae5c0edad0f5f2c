"""Execution evidence in the ranking: the issue's code, run at the base commit in the real sandbox
(local backend, a real git fixture repository), lifts the file its later statements reach and the
text does not name; absent evidence leaves the ranking as it was."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agents.context import TaskContext
from fixgraph.config import load_config
from fixgraph.dataset import Task
from fixgraph.localize import RepoIndex, execution_signal
from fixgraph.repo.workspace import RepoCache, Worktree
from fixgraph.sandbox.process import sandbox_mode
from scoring.execution.runner import make_runner
from scoring.runtime.issue_run import IssueTrace, TracedError, trace_issue
from tests.helpers.testrun_helpers import local_settings, make_repo

REPO = "acme/shapes"
# The issue names the front door (``front``, ``Widget.render``); the wrong number is made in
# ``engine.py``, which no word of the issue names.
FILES = {
    "shapes/__init__.py": "",
    "shapes/front.py": (
        '"""Widgets render shapes: the front door of the package."""\n\n'
        "from shapes import engine\n\n\n"
        "class Widget:\n"
        '    """A widget that renders a shape at a size."""\n\n'
        "    def __init__(self):\n"
        "        self.size = 1\n\n"
        "    def render(self, factor):\n"
        '        """Render the widget: the widget size times the factor."""\n'
        "        return engine.apply(self.size, factor)\n"
    ),
    "shapes/engine.py": "def apply(a, b):\n    if b < 0:\n        raise ValueError('out of range')\n    return a * b + 1\n",
    "shapes/widgets_doc.py": '"""Widget render widget widget: notes on the widget front door."""\n',
}
ISSUE = (
    "Widget render gives the wrong size\n\n"
    "Rendering a widget with a factor should give the widget size times the factor:\n\n"
    "```python\nfrom shapes.front import Widget\nw = Widget()\nprint(w.render(3))  # 4, not 3\n```\n"
)

sandboxed = pytest.mark.skipif(sandbox_mode() == "none", reason="no sandbox on this machine")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Task, Worktree]:
    mirrors, commit = make_repo(tmp_path, FILES, repo=REPO)
    task = Task(instance_id="acme__shapes-1", repo=REPO, base_commit=commit, problem_statement=ISSUE)
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, task.instance_id)
    return mirrors, task, wt


def rank_of(index: RepoIndex, path: str) -> int | None:
    ranked = [c.path for c in index.rank(ISSUE, k=50)]
    return ranked.index(path) + 1 if path in ranked else None


def test_execution_signal_is_how_late_a_file_was_first_called() -> None:
    assert execution_signal({}) == {}
    assert execution_signal({"a.py": 2, "b.py": 2}) == {}  # one statement: no order
    assert execution_signal({"a.py": 1, "b.py": 2, "c.py": 5}) == {"b.py": 0.25, "c.py": 1.0}


@pytest.mark.slow
@sandboxed
def test_the_file_the_issue_code_reaches_late_climbs(repo, tmp_path: Path) -> None:
    _, task, wt = repo
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    trace = trace_issue(runner, task, wt, ISSUE, timeout_s=60)
    assert trace.reason == ""
    assert trace.first == {"shapes/front.py": 1, "shapes/engine.py": 2}
    index = RepoIndex.build(wt, tmp_path / "cache")
    before = rank_of(index, "shapes/engine.py")
    index.attach_execution(execution_signal(trace.first), trace.note())
    after = rank_of(index, "shapes/engine.py")
    assert before is None and after == 2  # the text alone never ranks it; the named file stays first
    assert index.execution_note.startswith("execution: 3 statements of 1 snippets called 2 repository files")
    assert index.rank_parts(ISSUE).executed == {"shapes/engine.py": 1.0}


def test_no_evidence_leaves_the_ranking_as_it_was(repo, tmp_path: Path) -> None:
    _, _, wt = repo
    index = RepoIndex.build(wt, tmp_path / "cache")
    plain = [c.path for c in index.rank(ISSUE, k=50)]
    # Paths the index does not have (a file made at run time, a venv's) are dropped, as are zeros.
    index.attach_execution({"not/in/repo.py": 1.0, "shapes/engine.py": 0.0}, "execution: nothing")
    assert index.execution == {}
    assert [c.path for c in index.rank(ISSUE, k=50)] == plain


def _context(task: Task, wt: Worktree, tmp_path: Path, execute: bool) -> TaskContext:
    cfg = load_config("static", env={}).model_copy(deep=True)
    cfg = cfg.model_copy(
        update={
            "tests": local_settings(run_root=tmp_path / "runs"),
            "explorer": cfg.explorer.model_copy(update={"execute_issue": execute}),
        }
    )
    return TaskContext(
        cfg=cfg,
        task=task,
        worktree=wt,
        llm=None,  # type: ignore[arg-type]  # set by the tests that reach an LLM
        publisher=None,  # type: ignore[arg-type]
        cache_dir=tmp_path / "cache",
    )


@pytest.mark.slow
@sandboxed
def test_the_planners_index_carries_the_evidence_unless_switched_off(repo, tmp_path: Path) -> None:
    _, task, wt = repo
    on = _context(task, wt, tmp_path, execute=True)
    index = on.index()
    assert index.execution == {"shapes/engine.py": 1.0}
    assert on.scratch["issue_trace"].statements == 3
    assert rank_of(index, "shapes/engine.py") == 2
    off = _context(task, wt, tmp_path, execute=False)
    assert off.index().execution == {} and off.index().execution_note == "execution: not run"
    assert "issue_trace" not in off.scratch


@pytest.mark.slow
@sandboxed
def test_localization_bench_executes_and_records_why_not(
    repo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.localization_bench import load_rows, main

    src, task, wt = repo
    mirrors = tmp_path / "bare"  # fetch's layout: <owner>+<name>/repo, a bare git dir
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(src / "acme+shapes"), str(mirrors / "acme+shapes" / "repo")],
        check=True,
    )
    patch = (
        "diff --git a/shapes/engine.py b/shapes/engine.py\n--- a/shapes/engine.py\n+++ b/shapes/engine.py\n"
    )
    rows = [
        {
            "instance_id": "acme__shapes-1",
            "repo": REPO,
            "base_commit": task.base_commit,
            "patch": patch,
            "problem_statement": ISSUE,
        },
        {
            "instance_id": "acme__shapes-2",
            "repo": REPO,
            "base_commit": task.base_commit,
            "patch": patch,
            "problem_statement": "engine apply is off by one, no code here",
        },
    ]
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "local.toml"
    config.write_text(f'name = "local"\n[tests]\nbackend = "local"\nrun_root = "{tmp_path / "runs"}"\n')
    out_rows = tmp_path / "rows.jsonl"
    common = [
        "--dataset",
        str(dataset),
        "--repos",
        str(mirrors),
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-timing",
    ]
    assert main([*common, "--execute", "--config", str(config), "-o", str(out_rows)]) == 0
    out = capsys.readouterr().out
    assert "execution evidence: 1 of 2 instances (shapes 1)" in out
    assert "1 the issue has no Python code to run" in out
    saved = load_rows(out_rows)
    assert saved["acme__shapes-1"].parts.executed == {"shapes/engine.py": 1.0}
    assert saved["acme__shapes-1"].execution.startswith("execution: 3 statements")
    assert saved["acme__shapes-2"].execution == "execution: not run (the issue has no Python code to run)"
    assert saved["acme__shapes-1"].ours[3] == 1.0 and saved["acme__shapes-1"].today[8] == 0.0
    # Without --execute nothing runs, and the row says so.
    assert main([*common, "-o", str(tmp_path / "plain.jsonl")]) == 0
    assert (
        "execution evidence: 0 of 2 instances; without it: 2 not asked (--execute)" in capsys.readouterr().out
    )
    assert not subprocess.run(
        ["git", "-C", str(wt.path), "status", "--porcelain"], capture_output=True, text=True, check=True
    ).stdout  # the task's worktree was only read


def test_the_planner_is_told_what_the_issue_code_raised_in_the_repository() -> None:
    trace = IssueTrace(
        statements=3,
        errors=[
            TracedError("NameError", "name 'q' is not defined", [], 0),  # the snippet's own slip: left out
            TracedError("prelude:ImportError", "no sympy", [], -1),
            TracedError(
                "ValueError",
                "out of range",
                [("shapes/front.py", 14, "render"), ("shapes/engine.py", 3, "apply")],
                2,
            ),
        ],
    )
    assert trace.evidence() == (
        "- statement 3: ValueError: out of range\n"
        "  raised at shapes/engine.py:3 in apply, from shapes/front.py:14 in render"
    )
    assert IssueTrace(statements=2).evidence() == ""


@pytest.mark.slow
@sandboxed
def test_the_planners_and_coders_prompts_carry_the_exception_the_issue_code_raised(repo, tmp_path: Path) -> None:
    from langgraph.graph import END, START, StateGraph

    from agents.planner import planner
    from fixgraph.models.llm import LLM, Meter
    from fixgraph.models.scripted import ScriptedChatModel
    from fixgraph.state import TaskState

    _, task, wt = repo
    issue = ISSUE.replace("w.render(3))  # 4, not 3", "w.render(-1))  # raises")
    task = task.model_copy(update={"problem_statement": issue})
    ctx = _context(task, wt, tmp_path, execute=True)
    model = ScriptedChatModel(script={"Plan": [{"files": ["shapes/engine.py"], "reasoning": "scripted"}]})
    ctx.llm = LLM(lambda role: model, Meter(ctx.cfg.budget, ctx.cfg.llm.prices))
    g = StateGraph(TaskState, context_schema=TaskContext)
    g.add_node("planner", planner)
    g.add_edge(START, "planner")
    g.add_edge("planner", END)
    state = g.compile().invoke(
        {"instance_id": task.instance_id, "problem": issue}, context=ctx, config={"recursion_limit": 10}
    )
    assert state["plan"]["files"] == ["shapes/engine.py"]
    [prompt] = model.prompts_for("Plan")
    assert "# The issue's code, run at the base commit" in prompt
    assert (
        "- statement 3: ValueError: out of range\n"
        "  raised at shapes/engine.py:3 in apply, from shapes/front.py:14 in render"
    ) in prompt
    # The Coder is told too: the exception and the frames it passed through, beside the code.
    from agents.coder import coder

    model.script["CodeChange"] = [{"edits": [{"path": "shapes/engine.py", "search": "    if b < 0:\n",
                                              "replace": "    if b < -1:\n"}], "explanation": "scripted"}]
    g = StateGraph(TaskState, context_schema=TaskContext)
    g.add_node("coder", coder)
    g.add_edge(START, "coder")
    g.add_edge("coder", END)
    after = g.compile().invoke({**state, "files_read": ["shapes/engine.py"]}, context=ctx,
                               config={"recursion_limit": 10})
    assert after["verdict"] == "Pending" and "-    if b < 0:" in after["patch"]
    [coder_prompt] = model.prompts_for("CodeChange")
    assert "# The issue's code, run at the base commit (exceptions raised inside the repository)" in coder_prompt
    assert "raised at shapes/engine.py:3 in apply, from shapes/front.py:14 in render" in coder_prompt
    assert coder_prompt.index("raised at shapes/engine.py:3") < coder_prompt.index("## shapes/engine.py")
    # And the Reproducer, which writes the test that must fail now.
    from agents.reproducer import reproducer

    ctx.cfg = ctx.cfg.model_copy(update={"critic": ctx.cfg.critic.model_copy(update={"tests": "own"})})
    model.script["ReproTestDraft"] = [{"path": "tests/test_render.py", "explanation": "scripted", "content": (
        "from shapes.front import Widget\n\n\ndef test_negative_factor():\n    assert Widget().render(-1) == -1\n")}]
    g = StateGraph(TaskState, context_schema=TaskContext)
    g.add_node("reproducer", reproducer)
    g.add_edge(START, "reproducer")
    g.add_edge("reproducer", END)
    reproduced = g.compile().invoke(state, context=ctx, config={"recursion_limit": 10})
    assert reproduced["repro"]["status"] == "accepted"
    [repro_prompt] = model.prompts_for("ReproTestDraft")
    assert "# The issue's code, run at the base commit (exceptions raised inside the repository)" in repro_prompt
    assert "raised at shapes/engine.py:3 in apply, from shapes/front.py:14 in render" in repro_prompt
    # An issue whose code raises nothing inside the repository adds no section.
    quiet = _context(task.model_copy(update={"problem_statement": ISSUE}), wt, tmp_path / "q", execute=True)
    quiet.index()
    assert quiet.scratch["issue_trace"].evidence() == ""
