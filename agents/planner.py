"""Planner: reads the issue and a map of the repository, and names the files to look at.

The map is the index's deterministic ranking of candidate files (with their classes and
functions) and the repository tree folded around them, within ``explorer.map_tokens``. On a rerun
the Planner also sees why: which paths it named do not exist (with the nearest real ones), or
what the Explorer learned before it ended with low confidence.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agents.common import execution_evidence, messages, stops_cleanly
from agents.context import TaskContext
from fixgraph.localize import clean_path
from fixgraph.state import Plan, TaskState


@stops_cleanly("planner")
def planner(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    settings = ctx.cfg.explorer
    index = ctx.index()
    ranked = index.rank(ctx.task.issue, k=settings.candidates_shown)
    prompt = messages(
        "the Planner", "planner",
        repo=ctx.task.repo,
        problem=ctx.task.issue,
        repo_map=index.repo_map(ranked, max_tokens=settings.map_tokens),
        execution=execution_evidence(ctx),
        feedback=state.get("plan_feedback", ""),
        previous=state.get("plan", {}).get("files", []),
        max_files=settings.max_files,
    )
    plan, usage = ctx.llm.structured("planner", "planner", Plan, prompt)
    files = list(dict.fromkeys(clean_path(p) for p in plan.files if p.strip()))[: settings.max_files]
    return {
        "plan": {"files": files, "reasoning": plan.reasoning},
        "planner_runs": state.get("planner_runs", 0) + 1,
        "plan_feedback": "",
        "usage": usage,
    }
