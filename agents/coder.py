"""Coder: writes the patch as search/replace edits, applies them, and takes the diff.

Each attempt starts from the base commit. On a retry the prompt carries the previous patch, the
Critic's findings and any crash context from the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from agents.common import execution_evidence, messages, stops_cleanly
from agents.context import TaskContext
from fixgraph.localize import RepoIndex, count_tokens
from fixgraph.models.llm import BudgetExceeded
from fixgraph.repo.edits import apply_edits
from fixgraph.repo.workspace import PatchError, Worktree
from fixgraph.state import AttemptRecord, CodeChange, TaskState, Usage, merge_usage


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


def rounds_done(state: TaskState) -> int:
    """The Coder's rounds so far (one attempt per round when coder.candidates is 1)."""
    return max((int(a.get("round") or a.get("number") or 0) for a in state.get("attempts", [])), default=0)


def _previous(state: TaskState) -> AttemptRecord | None:
    """The attempt the next round improves on: the best so far when there are candidates."""
    attempts = state.get("attempts", [])
    best = [a for a in attempts if a.get("number") == state.get("best")]
    return best[0] if best else (attempts[-1] if attempts else None)


def _rotated(files: list[dict[str, str]], k: int) -> list[dict[str, str]]:
    return files[k % len(files):] + files[:k % len(files)] if files else files


@stops_cleanly("coder")
def coder(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    wt = ctx.worktree
    number = len(state.get("attempts", [])) + 1
    round_no = rounds_done(state) + 1
    exploration = state.get("exploration", {})
    suspects = exploration.get("suspects", [])
    files = coder_files(wt, ctx.index(), state.get("files_read", []), suspects,
                        ctx.cfg.coder.token_budget, ctx.cfg.coder.window_lines)
    previous = _previous(state)

    def prompt(shown: list[dict[str, str]]) -> list[Any]:
        return messages(
            "the Coder", "coder",
            repo=ctx.task.repo,
            problem=ctx.task.issue,
            confidence=exploration.get("confidence", "unknown"),
            learned=exploration.get("learned", ""),
            suspects=suspects,
            execution=execution_evidence(ctx),
            files=shown,
            previous_patch=(previous or {}).get("patch", ""),
            feedback=state.get("feedback", ""),
            crash_context=(previous or {}).get("crash_context", ""),
            repro=_repro_view(state.get("repro") or {}),
            attempt=round_no,
            max_attempts=ctx.cfg.max_attempts,
        )

    if ctx.cfg.coder.candidates > 1:
        return _candidates(ctx, files, prompt, number, round_no)
    wt.reset()
    change, usage = ctx.llm.structured("coder", "coder", CodeChange, prompt(files))
    patch, failed = _patch_of(wt, change, number, round_no)
    if failed is not None:
        return {"attempts": [failed], "patch": "", "verdict": "CannotApply", "usage": usage,
                "feedback": _apply_feedback(failed)}
    update: dict[str, Any] = {"patch": patch, "explanation": change.explanation, "usage": usage,
                              "feedback": "", "verdict": "Pending"}
    if not ctx.cfg.critic.enabled:
        update["attempts"] = [AttemptRecord(number=number, round=round_no, patch=patch, explanation=change.explanation,
                                            verdict="Skipped", findings=[], score={"kind": "none"})]
        update["verdict"] = "Skipped"
    return update


def _patch_of(wt: Worktree, change: CodeChange, number: int, round_no: int) -> tuple[str, AttemptRecord | None]:
    """The diff of ``change`` applied at the base commit, or the record of why it did not apply."""
    wt.reset()
    try:
        apply_edits(wt, change.edits)
        patch = wt.diff()
        if not patch.strip():
            raise PatchError("the edits change nothing")
        return patch, None
    except PatchError as exc:
        wt.reset()
        return "", AttemptRecord(
            number=number, round=round_no, patch="", explanation=change.explanation, verdict="CannotApply",
            findings=[{"source": "apply", "rule": "edit", "message": str(exc), "severity": "error"}],
            score={"fix_score": 0.0, "kind": "none", "note": str(exc)})


def _apply_feedback(failed: AttemptRecord) -> str:
    message = (failed.get("findings") or [{}])[0].get("message", "")
    return f"Your edits could not be applied: {message}. Copy search text exactly from the file."


def _candidates(ctx: TaskContext, files: list[dict[str, str]], prompt: Callable[[list[dict[str, str]]], list[Any]],
                number: int, round_no: int) -> dict[str, Any]:
    """coder.candidates patches for this round, each from its own sample: the first from the usual
    prompt, the others at ``coder.sample_temperature`` with the files shown in a rotated order. They
    are left in ``candidates`` for the Critic; those whose edits do not apply are recorded now.

    The budget is checked before each sample: when it runs out the round keeps the samples it has
    (the task then stops), so N never makes a task spend past its budget."""
    settings = ctx.cfg.coder
    usage: Usage = {}
    pending: list[dict[str, Any]] = []
    failed: list[AttemptRecord] = []
    stop = ""
    for k in range(settings.candidates):
        shown = _rotated(files, k)
        sample = {"index": k, "temperature": ctx.cfg.llm.temperature if k == 0 else settings.sample_temperature,
                  "file_order": [f["path"] for f in shown]}
        try:
            change, delta = ctx.llm.structured("coder", "coder", CodeChange, prompt(shown),
                                               temperature=None if k == 0 else settings.sample_temperature)
        except BudgetExceeded as exc:
            if k == 0:
                raise
            stop = f"budget: {exc}"
            break
        usage = merge_usage(usage, delta)
        patch, bad = _patch_of(ctx.worktree, change, number + len(failed), round_no)
        if bad is not None:
            failed.append(bad | {"sample": sample})
        else:
            pending.append({"patch": patch, "explanation": change.explanation, "sample": sample, "round": round_no})
    ctx.worktree.reset()
    update: dict[str, Any] = {"attempts": failed, "candidates": pending, "usage": usage,
                              "patch": pending[0]["patch"] if pending else "",
                              "explanation": pending[0]["explanation"] if pending else ""}
    if stop:
        update["stop_reason"] = stop
    if not pending:
        return update | {"verdict": "CannotApply", "feedback": _apply_feedback(failed[-1])}
    if not ctx.cfg.critic.enabled:
        n = number + len(failed)
        update["attempts"] = failed + [
            AttemptRecord(number=n + i, round=round_no, patch=c["patch"], explanation=c["explanation"],
                          verdict="Skipped", findings=[], score={"kind": "none"}, sample=c["sample"])
            for i, c in enumerate(pending)]
        return update | {"candidates": [], "verdict": "Skipped", "feedback": ""}
    return update | {"verdict": "Pending", "feedback": ""}
