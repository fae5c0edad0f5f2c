"""Planner: reads the issue and a map of the repository, and names the files to look at."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agents.common import messages, stops_cleanly
from fixgraph.context import TaskContext
from fixgraph.state import Plan, TaskState


@stops_cleanly("planner")
def planner(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    settings = ctx.cfg.explorer
    index = ctx.index()
    ranked = index.rank(ctx.instance.problem_statement, k=settings.candidates_shown)
    prompt = messages(
        "the Planner", "planner",
        repo=ctx.instance.repo,
        problem=ctx.instance.problem_statement,
        repo_map=index.repo_map(ranked),
        feedback=state.get("plan_feedback", ""),
        max_files=settings.max_files,
    )
    plan, usage = ctx.llm.structured("planner", "planner", Plan, prompt)
    return {
        "plan": plan.model_dump(),
        "planner_runs": state.get("planner_runs", 0) + 1,
        "plan_feedback": "",
        "usage": usage,
    }
