"""Coder: writes the patch as search/replace edits, applies them, and takes the diff.

Each attempt starts from the base commit. On a retry the prompt carries the previous patch, the
Critic's findings and any crash context from the tests.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agents.common import messages, stops_cleanly
from fixgraph.context import TaskContext
from fixgraph.edits import apply_edits
from fixgraph.state import AttemptRecord, CodeChange, TaskState
from fixgraph.workspace import PatchError, Worktree

# Lines of context shown around a suspect when a file is too long to show whole.
WINDOW = 60


def code_view(wt: Worktree, path: str, suspects: list[dict[str, Any]], max_lines: int) -> str | None:
    """The file as the Coder sees it: raw text (so edits can quote it), windows if it is long."""
    text = wt.read(path)
    if text is None:
        return None
    lines = text.split("\n")
    ranges = [(s.get("start_line", 0), s.get("end_line", 0)) for s in suspects if s.get("file") == path]
    ranges = [(a, b or a) for a, b in ranges if a > 0]
    if len(lines) <= max_lines or not ranges:
        return text if len(lines) <= max_lines * 2 else "\n".join(lines[: max_lines * 2]) + "\n# ... (truncated)"
    keep: set[int] = set()
    for a, b in ranges:
        keep.update(range(max(0, a - 1 - WINDOW), min(len(lines), b + WINDOW)))
    out, prev = [], -2
    for i in sorted(keep):
        if i != prev + 1:
            out.append("# ... (lines omitted)")
        out.append(lines[i])
        prev = i
    return "\n".join(out)


@stops_cleanly("coder")
def coder(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    wt = ctx.worktree
    wt.reset()
    number = len(state.get("attempts", [])) + 1
    exploration = state.get("exploration", {})
    suspects = exploration.get("suspects", [])
    files = []
    for path in state.get("files_read", []):
        content = code_view(wt, path, suspects, ctx.cfg.explorer.skeleton_over_lines)
        if content is not None:
            files.append({"path": path, "content": content})
    previous = state.get("attempts", [])[-1] if state.get("attempts") else None
    prompt = messages(
        "the Coder", "coder",
        repo=ctx.instance.repo,
        problem=ctx.instance.problem_statement,
        confidence=exploration.get("confidence", "unknown"),
        learned=exploration.get("learned", ""),
        suspects=suspects,
        files=files,
        previous_patch=(previous or {}).get("patch", ""),
        feedback=state.get("feedback", ""),
        crash_context=(previous or {}).get("crash_context", ""),
        attempt=number,
        max_attempts=ctx.cfg.max_attempts,
    )
    change, usage = ctx.llm.structured("coder", "coder", CodeChange, prompt)
    try:
        apply_edits(wt, change.edits)
        patch = wt.diff()
        if not patch.strip():
            raise PatchError("the edits change nothing")
    except PatchError as exc:
        wt.reset()
        failed = AttemptRecord(number=number, patch="", explanation=change.explanation, verdict="CannotApply",
                               findings=[{"source": "apply", "rule": "edit", "message": str(exc), "severity": "error"}],
                               score={"fix_score": 0.0, "kind": "none", "note": str(exc)})
        return {"attempts": [failed], "patch": "", "verdict": "CannotApply", "usage": usage,
                "feedback": f"Your edits could not be applied: {exc}. Copy search text exactly from the file."}
    update: dict[str, Any] = {"patch": patch, "explanation": change.explanation, "usage": usage,
                              "feedback": "", "verdict": "Pending"}
    if not ctx.cfg.critic.enabled:
        update["attempts"] = [AttemptRecord(number=number, patch=patch, explanation=change.explanation,
                                            verdict="Skipped", findings=[], score={"kind": "none"})]
        update["verdict"] = "Skipped"
    return update
