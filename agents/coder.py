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
from fixgraph.localize import RepoIndex, count_tokens
from fixgraph.state import AttemptRecord, CodeChange, TaskState
from fixgraph.workspace import PatchError, Worktree


def _windows(lines: list[str], ranges: list[tuple[int, int]], window: int) -> str:
    keep: set[int] = set()
    for a, b in ranges:
        keep.update(range(max(0, a - 1 - window), min(len(lines), b + window)))
    out, prev = [], -2
    for i in sorted(keep):
        if i != prev + 1:
            out.append(f"# ... (lines omitted; next line is line {i + 1})")
        out.append(lines[i])
        prev = i
    if prev < len(lines) - 1:
        out.append("# ... (rest of the file omitted)")
    return "\n".join(out)


def code_view(wt: Worktree, index: RepoIndex, path: str, suspects: list[dict[str, Any]],
              max_tokens: int, window: int) -> dict[str, str] | None:
    """The file as the Coder sees it, within ``max_tokens``.

    Raw text (so edits can quote it exactly): the whole file when it fits, else windows around
    the suspects, narrowed until they fit. A file with no suspect that does not fit is shown as the
    index's outline, for reference only: its numbered lines cannot be quoted in an edit.
    """
    text = wt.read(path)
    if text is None:
        return None
    if count_tokens(text) <= max_tokens:
        return {"path": path, "kind": "code", "content": text}
    lines = text.split("\n")
    ranges = [(int(s.get("start_line") or 0), int(s.get("end_line") or 0)) for s in suspects if s.get("file") == path]
    ranges = [(a, max(a, b)) for a, b in ranges if a > 0]
    if ranges:
        while True:
            view = _windows(lines, ranges, window)
            if count_tokens(view) <= max_tokens or window <= 5:
                return {"path": path, "kind": "code", "content": view}
            window //= 2
    focus = [str(s.get("symbol")) for s in suspects if s.get("symbol")]
    return {"path": path, "kind": "outline", "content": index.view(path, focus, max_tokens)}


def coder_files(wt: Worktree, index: RepoIndex, read: list[str], suspects: list[dict[str, Any]],
                budget: int, window: int) -> list[dict[str, str]]:
    """Suspect files first; each file gets an equal share, and what small files leave goes on."""
    with_suspects = [p for p in read if any(s.get("file") == p for s in suspects)]
    order = with_suspects + [p for p in read if p not in with_suspects]
    files: list[dict[str, str]] = []
    left = budget
    for n, path in enumerate(order):
        view = code_view(wt, index, path, suspects, left // (len(order) - n), window)
        if view is not None:
            files.append(view)
            left -= count_tokens(view["content"])
    return files


def _repro_view(repro: dict[str, Any]) -> dict[str, str] | None:
    """The accepted reproduction test as the Coder sees it: the file and how it fails now."""
    if repro.get("status") != "accepted":
        return None
    return {"path": repro.get("path", ""), "content": repro.get("content", ""),
            "output": str(repro.get("base_output", ""))[-1500:]}


@stops_cleanly("coder")
def coder(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    wt = ctx.worktree
    wt.reset()
    number = len(state.get("attempts", [])) + 1
    exploration = state.get("exploration", {})
    suspects = exploration.get("suspects", [])
    files = coder_files(wt, ctx.index(), state.get("files_read", []), suspects,
                        ctx.cfg.coder.token_budget, ctx.cfg.coder.window_lines)
    previous = state.get("attempts", [])[-1] if state.get("attempts") else None
    prompt = messages(
        "the Coder", "coder",
        repo=ctx.task.repo,
        problem=ctx.task.issue,
        confidence=exploration.get("confidence", "unknown"),
        learned=exploration.get("learned", ""),
        suspects=suspects,
        files=files,
        previous_patch=(previous or {}).get("patch", ""),
        feedback=state.get("feedback", ""),
        crash_context=(previous or {}).get("crash_context", ""),
        repro=_repro_view(state.get("repro") or {}),
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
