"""PR agent: chooses the attempt to deliver and hands it to the run's publisher.

With EVAL_MODE the publisher writes ``predictions/{instance_id}.diff`` and the predictions JSONL;
otherwise it pushes a branch and opens a pull request. A patch the guard blocks is never delivered.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agents.context import TaskContext
from fixgraph.publish import Outcome
from fixgraph.state import AttemptRecord, TaskState
from scoring.execution.testenv import PASSING
from scoring.runtime import replay
from scoring.verdict import choose_patch


def choose(attempts: list[AttemptRecord], guard_blocks: bool, rule: bool = False) -> AttemptRecord | None:
    """The best attempt by fix_score (the later one on ties), or with ``rule`` (coder.candidates > 1)
    by the selection rule (scoring/verdict/choose_patch.py); None when none is deliverable."""
    if rule:
        return choose_patch.best_attempt(attempts, guard_blocks)
    usable = [a for a in attempts if a.get("patch")]
    if guard_blocks:
        usable = [a for a in usable if not any(f.get("source") == "guard" for f in a.get("findings", []))]
    if not usable:
        return None
    return max(usable, key=lambda a: (float(a.get("score", {}).get("fix_score") or 0.0), a.get("number", 0)))


def _repro_to_deliver(state: TaskState, chosen: AttemptRecord) -> dict[str, Any] | None:
    """The reproduction test, when it failed at the base and every one of its tests passes with
    the delivered patch: then it is worth keeping as a regression test. The issue's own code, a
    reproduction too (``scoring.runtime.replay``), is no file to deliver."""
    repro = state.get("repro") or {}
    after = {t: s for t, s in (chosen.get("score", {}).get("fail_to_pass") or {}).items()
             if not replay.is_reproduction_id(t)}
    if repro.get("status") != "accepted" or chosen.get("score", {}).get("tests_source") != "own" or not after:
        return None
    if any(status not in PASSING for status in after.values()):
        return None
    return {"path": repro.get("path", ""), "content": repro.get("content", ""), "tests": sorted(after),
            "files": list(repro.get("files") or [])}


def pr_agent(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    attempts = list(state.get("attempts", []))
    # A patch the Critic never saw (the budget ran out mid-loop) is still the best we have.
    unjudged = [state.get("patch", "")] + [c.get("patch", "") for c in state.get("candidates") or []]
    unchecked: list[AttemptRecord] = []
    for patch in dict.fromkeys(p for p in unjudged if p):
        if not any(a.get("patch") == patch for a in attempts):
            unchecked.append(AttemptRecord(number=len(attempts) + 1, patch=patch, verdict="Unchecked",
                                           findings=[], score={"kind": "none"}))
            attempts.append(unchecked[-1])
    several = ctx.cfg.coder.candidates > 1
    # With candidates, the record keeps every one, judged or not.
    added = {"attempts": unchecked} if several and unchecked else {}
    guard_blocks = ctx.cfg.critic.guard == "block"
    chosen = choose(attempts, guard_blocks, rule=several)
    if chosen is None:
        reason = state.get("stop_reason") or "no attempt produced a deliverable patch"
        return {"published": {"kind": "none", "reason": reason}, "stop_reason": reason} | added
    score = chosen.get("score", {})
    if ctx.cfg.critic.require_tests and score.get("kind") in ("semantic", "none"):
        reason = f"require_tests: no test ran on the patch ({score.get('note') or 'tests not run'})"
        return {"published": {"kind": "none", "reason": reason}, "stop_reason": reason, "failed": reason} | added
    ctx.worktree.reset()
    ctx.worktree.apply(chosen.get("patch", ""))
    outcome = Outcome(
        task=ctx.task,
        patch=chosen.get("patch", ""),
        explanation=chosen.get("explanation", ""),
        verdict=chosen.get("verdict", ""),
        score=chosen.get("score", {}),
        attempts=attempts,
        plan=state.get("plan", {}),
        files_read=state.get("files_read", []),
        usage=state.get("usage", {}),
        stop_reason=state.get("stop_reason") or "done",
        guard_warnings=[dict(f) for f in chosen.get("findings", []) if f.get("source") == "guard"],
        worktree=ctx.worktree,
        repro_test=_repro_to_deliver(state, chosen) if ctx.cfg.github.include_repro_test else None,
    )
    published = ctx.publisher.publish(outcome) | {"attempt": chosen.get("number")}
    if several:
        published["selection"] = [r.to_dict() for r in choose_patch.rank_attempts(attempts, guard_blocks)]
    return {"published": published, "stop_reason": state.get("stop_reason") or "done"} | added
