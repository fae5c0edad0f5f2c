"""The LLM runtime-error check (REDO §3.2), for patches the static phase passes.

The model sees the problem statement, the original code of the functions the patch touches and
the patch, and answers with a ``RuntimeCheck``: Safe or Unsafe, and each suspected error with its
type, location and reasoning. The prompt asks it to prune errors unlikely to be triggered while
exercising the issue, as REDO's SWE-bench prompt does. A reply without a verdict is no verdict
(``None``), never Safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from fixgraph.dataset import Task
from fixgraph.models.llm import LLM, InvalidReply
from fixgraph.prompts import render
from fixgraph.repo.workspace import Worktree
from fixgraph.state import Finding, RuntimeCheck, SuspectedError, Usage, merge_usage
from scoring.static.patchinfo import PatchParseError, SymbolMap, base_content, parse_patch

ROLE = "critic"
NODE = "critic"
MAX_FUNCTION_LINES = 200
MAX_TOTAL_LINES = 800


@dataclass(frozen=True)
class OriginalFunction:
    file: str
    name: str
    start: int
    code: str


def original_functions(wt: Worktree, patch: str) -> list[OriginalFunction]:
    """The base-commit code of each function (or class body line) the patch changes."""
    try:
        changes = parse_patch(patch)
    except PatchParseError:
        return []
    out: list[OriginalFunction] = []
    total = 0
    for c in changes:
        if not c.is_python or c.is_new:
            continue
        source = base_content(wt, c.path)
        if source is None:
            continue
        symbols = SymbolMap(source)
        lines = source.splitlines()
        for scope in symbols.functions_touching(c.removed | c.anchors):
            body = lines[scope.start - 1: scope.end]
            if len(body) > MAX_FUNCTION_LINES:
                body = body[:MAX_FUNCTION_LINES] + [f"... ({scope.end - scope.start + 1 - MAX_FUNCTION_LINES} more lines)"]
            if total + len(body) > MAX_TOTAL_LINES:
                return out
            total += len(body)
            out.append(OriginalFunction(c.path, scope.qualname, scope.start, "\n".join(body)))
    return out


def prompt(task: Task, wt: Worktree, patch: str, static_notes: list[str] | None = None) -> list[BaseMessage]:
    return [
        SystemMessage(render("system", role="the Critic")),
        HumanMessage(render("runtime_check", repo=task.repo, problem=task.issue,
                            functions=original_functions(wt, patch), patch=patch,
                            static_notes=static_notes or [])),
    ]


def runtime_check(llm: LLM, task: Task, wt: Worktree, patch: str, calls: int = 1,
                  static_notes: list[str] | None = None) -> tuple[RuntimeCheck | None, Usage]:
    """Ask ``calls`` times; the majority verdict among the replies that gave one wins, a tie is
    Unsafe (a false alarm costs one retry, a missed crash costs the task). ``None`` when no reply
    had a verdict."""
    messages = prompt(task, wt, patch, static_notes)
    usage: Usage = {}
    answers: list[RuntimeCheck] = []
    for _ in range(max(1, calls)):
        try:
            check, delta = llm.structured(ROLE, NODE, RuntimeCheck, messages)
        except InvalidReply as exc:
            usage = merge_usage(usage, exc.usage)
            continue
        usage = merge_usage(usage, delta)
        answers.append(check)
    if not answers:
        return None, usage
    unsafe = [a for a in answers if a.verdict == "Unsafe"]
    if len(unsafe) * 2 < len(answers):
        return RuntimeCheck(verdict="Safe", errors=[]), usage
    errors: list[SuspectedError] = []
    seen: set[tuple[str, str]] = set()
    for a in unsafe:
        for e in a.errors:
            if (e.type, e.location) not in seen:
                seen.add((e.type, e.location))
                errors.append(e)
    return RuntimeCheck(verdict="Unsafe", errors=errors), usage


_LOCATION = re.compile(r"^(?P<file>[^:\s]+\.pyi?)(?::(?P<line>\d+))?(?::(?P<symbol>[\w.]+))?")


def to_findings(check: RuntimeCheck, wt: Worktree | None = None) -> list[Finding]:
    """The LLM's suspected errors as findings, with file and line split out of its location and,
    given the worktree (patch applied), the line of code it points at."""
    out: list[Finding] = []
    for e in check.errors:
        m = _LOCATION.match(e.location.strip())
        f = Finding(source="llm", rule=e.type, message=e.reasoning, file=e.location, severity="error")
        if m:
            f["file"] = m.group("file")
            if m.group("line"):
                f["line"] = int(m.group("line"))
            if m.group("symbol"):
                f["symbol"] = m.group("symbol")
        line = f.get("line", 0)
        if wt is not None and line:
            text = wt.read(f.get("file", ""))
            lines = text.splitlines() if text else []
            if 0 < line <= len(lines):
                f["code"] = lines[line - 1].strip()
        out.append(f)
    return out
