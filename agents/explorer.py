"""Explorer: reads files iteratively, as the seed decided.

Iteration 1 reads every file the Planner named; iterations 2 and 3 let the LLM choose what to read
next from options the index computes (imports, tests, config, callers). Hard stop at
``max_files`` files or ``max_iterations`` iterations, whichever comes first. Everything it shows
fits ``token_budget``: large files are skeletons with bodies only for the symbols that matter.

It sends the task back to the Planner, at most ``max_planner_reruns`` times in all, when a named
file does not exist (told which, with the nearest real paths) or when it ends with confidence
``low`` (told what it learned). Each rerun is recorded in ``state["reruns"]``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from agents.common import messages, stops_cleanly
from agents.context import TaskContext
from fixgraph.config import ExplorerSettings
from fixgraph.localize import Option, RepoIndex, clean_path, count_tokens, parse_problem, views_within
from fixgraph.state import ExploreStep, Suspect, TaskState, Usage, merge_usage

# Each file's heading and code fence in the template, in tokens, reserved before the views.
_PER_FILE_OVERHEAD = 20
# The issue may take at most this share of the Explorer's budget; the rest is for reading code.
_PROBLEM_SHARE = 3
_FOCUS_MAX_DEFS = 10


def issue_focus(index: RepoIndex, problem: str) -> list[str]:
    """Names the issue mentions that the repository defines: their bodies are shown in full."""
    q = parse_problem(problem)
    # Dunders and names defined all over the repository (``__init__``, ``sin``) would spend the
    # budget on bodies that say nothing about this issue.
    return [name for name, _ in sorted(q.idents.items(), key=lambda t: (-t[1], t[0]))
            if name in index.defs and not (name.startswith("__") and name.endswith("__"))
            and len(index.defs[name]) <= _FOCUS_MAX_DEFS][:20]


def explorer_messages(index: RepoIndex, repo: str, problem: str, read: list[str], focus: list[str],
                      options: list[Option], iteration: int, settings: ExplorerSettings) -> list[BaseMessage]:
    """The Explorer's prompt, with file views sized so the whole prompt fits the budget."""
    budget = settings.token_budget
    cap = budget // _PROBLEM_SHARE
    if count_tokens(problem) > cap:
        problem = problem[: cap * 3] + "\n[... the rest of the issue is cut to fit the Explorer's budget]"
    variables: dict[str, Any] = dict(
        repo=repo, problem=problem, iteration=iteration, max_iterations=settings.max_iterations,
        files_read=read, max_files=settings.max_files, options=options,
        remaining=settings.max_files - len(read),
    )
    bare = messages("the Explorer", "explorer", files=[], **variables)
    overhead = sum(count_tokens(str(m.content)) for m in bare) + _PER_FILE_OVERHEAD * len(read)
    views = views_within(index, read, focus, max(budget - overhead, 200 * max(len(read), 1)),
                         settings.skeleton_over_lines)
    return messages("the Explorer", "explorer", files=[{"path": p, "view": v} for p, v in views], **variables)


def _ordered_options(index: RepoIndex, problem: str, read: list[str], focus: list[str],
                     limit: int) -> list[Option]:
    # The index's options in the order the ranking puts them: the likeliest first, so the cap
    # on how many are shown drops the least likely.
    position = {c.path: i for i, c in enumerate(index.rank(problem, k=500))}
    opts = index.options(read, focus)
    opts.sort(key=lambda o: position.get(o.path, len(position)))
    return opts[:limit]


def _with_lines(index: RepoIndex, suspects: list[Suspect]) -> list[dict[str, Any]]:
    """Suspects with line ranges filled from the index where the LLM left them out."""
    out: list[dict[str, Any]] = []
    for s in suspects:
        d = s.model_dump()
        info = index.infos.get(s.file)
        if s.symbol and info is not None and not s.start_line:
            for sym in info.symbols:
                if s.symbol in (sym.qualname, sym.name):
                    d["start_line"], d["end_line"] = sym.start, sym.end
                    break
        out.append(d)
    return out


@stops_cleanly("explorer")
def explorer(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    settings = ctx.cfg.explorer
    index = ctx.index()
    problem = ctx.task.issue
    planned = list(dict.fromkeys(clean_path(p) for p in state.get("plan", {}).get("files", []) if p.strip()))
    reruns_left = len(state.get("reruns", [])) < settings.max_planner_reruns
    runs = state.get("explorer_runs", 0) + 1

    missing = [p for p in planned if not index.exists(p)]
    if missing and reruns_left:
        lines = [f"- {p} does not exist; nearest real paths: {', '.join(index.nearest(p)) or 'none'}"
                 for p in missing]
        return {
            "explorer_runs": runs,
            "reruns": [{"reason": "missing_file", "paths": missing,
                        "nearest": {p: index.nearest(p) for p in missing}}],
            "plan_feedback": "Some paths you named do not exist in the repository:\n" + "\n".join(lines),
        }

    to_read = [p for p in planned if index.exists(p)]
    if not to_read:
        # Reruns are spent and nothing named exists: fall back on the index's own ranking.
        to_read = [c.path for c in index.rank(problem, k=3)]
    base_focus = issue_focus(index, problem)
    focus = list(base_focus)
    read: list[str] = []
    usage: Usage = {}
    step = ExploreStep(confidence="low", learned="nothing could be read")
    iteration = 0
    for iteration in range(1, settings.max_iterations + 1):
        # Iteration 1 reads every file the Planner named (up to the cap); later ones what the LLM chose.
        for path in to_read:
            if path not in read and len(read) < settings.max_files:
                read.append(path)
        remaining = settings.max_files - len(read)
        last = iteration == settings.max_iterations or remaining <= 0
        options = [] if last else _ordered_options(index, problem, read, focus, settings.candidates_shown)
        prompt = explorer_messages(index, ctx.task.repo, problem, read, focus, options, iteration, settings)
        step, delta = ctx.llm.structured("explorer", "explorer", ExploreStep, prompt)
        usage = merge_usage(usage, delta)
        focus = list(dict.fromkeys([s.symbol for s in step.suspects if s.symbol] + base_focus))
        if last or not options:
            break
        allowed = {o.path for o in options}
        to_read = [p for p in dict.fromkeys(step.next_files) if p in allowed and p not in read][:remaining]
        if not to_read:
            break

    report = {"suspects": _with_lines(index, step.suspects), "learned": step.learned,
              "confidence": step.confidence, "next_files": step.next_files,
              "iterations": iteration, "files": read,
              # Whether the ranking that fed the Planner and the options used the repository's
              # history, and if not why (shallow mirror, no commits before the base).
              "history": index.history_note,
              # Whether the issue's own code ran and reached the ranking (execution evidence).
              "execution": index.execution_note}
    update: dict[str, Any] = {"files_read": read, "exploration": report, "explorer_runs": runs, "usage": usage}
    if step.confidence == "low" and reruns_left:
        update["reruns"] = [{"reason": "low_confidence", "learned": step.learned, "files": read}]
        update["plan_feedback"] = (
            "The Explorer read " + ", ".join(read) + " and is not confident the fix is there. "
            f"What it learned: {step.learned or 'nothing useful'}. Name other files."
        )
    return update


def needs_replan(state: TaskState) -> bool:
    return bool(state.get("plan_feedback")) and not state.get("stop_reason")
