"""Explorer: reads files iteratively, as the seed decided.

Iteration 1 reads every file the Planner named; iterations 2 and 3 let the LLM choose what to read
next from options the index computes (imports, tests, config, callers). Hard stop at
``max_files`` files or ``max_iterations`` iterations. It sends the task back to the Planner when a
named file does not exist or when it ends with confidence ``low``, a bounded number of times.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agents.common import messages, stops_cleanly
from fixgraph.context import TaskContext
from fixgraph.state import ExploreStep, TaskState, Usage, merge_usage


@stops_cleanly("explorer")
def explorer(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    settings = ctx.cfg.explorer
    index = ctx.index()
    planned = list(dict.fromkeys(state.get("plan", {}).get("files", [])))
    reruns_left = len(state.get("reruns", [])) < settings.max_planner_reruns
    runs = state.get("explorer_runs", 0) + 1

    missing = [p for p in planned if not index.exists(p)]
    if missing and reruns_left:
        lines = [f"- {p} does not exist; nearest real paths: {', '.join(index.nearest(p)) or 'none'}"
                 for p in missing]
        return {
            "explorer_runs": runs,
            "reruns": [{"reason": "missing_file", "paths": missing}],
            "plan_feedback": "Some paths you named do not exist in the repository:\n" + "\n".join(lines),
        }

    to_read = [p for p in planned if index.exists(p)]
    if not to_read:
        # Reruns are spent and nothing named exists: fall back on the index's own ranking.
        to_read = [c.path for c in index.rank(ctx.instance.problem_statement, k=3)]
    per_file = settings.token_budget // settings.max_files
    read: list[str] = []
    usage: Usage = {}
    step = ExploreStep(confidence="low", learned="nothing could be read")
    focus: list[str] = []
    iteration = 0
    for iteration in range(1, settings.max_iterations + 1):
        for path in to_read:
            if path not in read and len(read) < settings.max_files:
                read.append(path)
        remaining = settings.max_files - len(read)
        last = iteration == settings.max_iterations or remaining <= 0
        options = [] if last else [o for o in index.options(read, focus) if o.path not in read]
        prompt = messages(
            "the Explorer", "explorer",
            repo=ctx.instance.repo,
            problem=ctx.instance.problem_statement,
            iteration=iteration,
            max_iterations=settings.max_iterations,
            files_read=read,
            max_files=settings.max_files,
            files=[{"path": p, "view": index.view(p, focus, per_file)} for p in read],
            options=options,
            remaining=remaining,
        )
        step, delta = ctx.llm.structured("explorer", "explorer", ExploreStep, prompt)
        usage = merge_usage(usage, delta)
        focus = [s.symbol for s in step.suspects if s.symbol]
        if last:
            break
        allowed = {o.path for o in options}
        to_read = [p for p in step.next_files if p in allowed and p not in read][:remaining]
        if not to_read:
            break

    report = step.model_dump() | {"iterations": iteration, "files": read}
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
