"""What every node shares: message building and turning LLM failures into a clean stop."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from agents.context import TaskContext
from fixgraph import phases
from fixgraph.models.llm import BudgetExceeded, LLMFailure
from fixgraph.prompts import render
from fixgraph.state import TaskState

F = TypeVar("F", bound=Callable[..., dict[str, Any]])


def messages(role: str, template: str, **variables: object) -> list[BaseMessage]:
    return [SystemMessage(render("system", role=role)), HumanMessage(render(template, **variables))]


def execution_evidence(ctx: TaskContext) -> str:
    """What the issue's code raised inside the repository at the base (``ctx.index()`` ran it),
    for the Planner's and the Coder's prompts; empty when it did not run or raised nothing there."""
    trace = ctx.scratch.get("issue_trace")
    return trace.evidence() if trace is not None else ""


def stops_cleanly(node: str) -> Callable[[F], F]:
    """A spent budget or a failed LLM call ends the task with what it has, and says why."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
            try:
                with phases.phase(f"node {node}"):
                    return fn(state, runtime)
            except BudgetExceeded as exc:
                return {"stop_reason": f"budget: {exc}"}
            except LLMFailure as exc:  # InvalidReply too; the usage counts what failed (timeouts, ...)
                return {"stop_reason": f"failed in {node}: {exc}", "failed": str(exc), "usage": exc.usage}

        return cast(F, inner)

    return wrap


def stopped(state: TaskState) -> bool:
    return bool(state.get("stop_reason"))
