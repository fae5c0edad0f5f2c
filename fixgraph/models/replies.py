"""What is wrong with a structured reply, named, and the re-ask that says so.

Three kinds, each counted in the task's usage and named in the record when the task fails:

- ``truncated``: the reply was cut off: ``finish_reason: length``, or tool-call arguments that do
  not parse as JSON (a server that cut the reply at its cap may still say ``tool_calls``). A
  streamed reply's arguments are completed by LangChain's partial-JSON parser, so they are read
  again strictly here: a cut reply must not pass as a short one. The re-ask asks for less.
- ``empty``: it parsed, but it is no answer for the node that asked (a Plan with no files, a
  CodeChange with no edits): the schema's ``empty()`` says why.
- ``invalid``: anything else (no tool call, arguments that do not fit the schema).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, HumanMessage
from pydantic import BaseModel

KINDS = ("truncated", "empty", "invalid")


@dataclass(frozen=True)
class Problem:
    kind: str  # one of KINDS
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.detail}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StreamedArguments(BaseCallbackHandler):
    """The tool-call argument strings of a streamed reply, piece by piece as they arrived: the
    message LangChain assembles keeps only their partial-JSON parse."""

    def __init__(self) -> None:
        self.args: dict[int, str] = {}

    def on_llm_new_token(self, token: str, *, chunk: Any = None, **kwargs: Any) -> None:
        for piece in getattr(getattr(chunk, "message", None), "tool_call_chunks", None) or []:
            i = int(piece.get("index") or 0)
            self.args[i] = self.args.get(i, "") + str(piece.get("args") or "")

    def strings(self) -> list[str]:
        return [self.args[i] for i in sorted(self.args)]


def raw_arguments(raw: BaseMessage | None, tool: str) -> list[str]:
    """The argument strings of the calls to ``tool`` as the server sent them (streamed or not)."""
    if raw is None:
        return []
    found = [str(c.get("args") or "") for c in getattr(raw, "invalid_tool_calls", None) or []
             if c.get("name") in (tool, None)]
    for call in (getattr(raw, "additional_kwargs", None) or {}).get("tool_calls") or []:
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        if fn.get("name") in (tool, None, "") and isinstance(fn.get("arguments"), str):
            found.append(fn["arguments"])
    return found


def _cut(args: str) -> bool:
    try:
        json.loads(args)
    except json.JSONDecodeError:
        return True
    return False


def problem_of(schema: type[BaseModel], out: Any, cap: int, streamed: list[str] | None = None) -> Problem | None:
    """None when ``out`` (``with_structured_output(include_raw=True)``'s answer) is a usable reply;
    ``streamed``: the argument strings as streamed (``StreamedArguments``)."""
    raw = out.get("raw") if isinstance(out, dict) else None
    parsed = out.get("parsed") if isinstance(out, dict) else None
    name = schema.__name__
    finish = str((getattr(raw, "response_metadata", None) or {}).get("finish_reason") or "")
    if finish == "length":
        cap_text = f" of {cap} tokens" if cap else ""
        return Problem("truncated", f"the reply was cut off at the output limit{cap_text} (finish_reason: length)")
    cut = [a for a in raw_arguments(raw, name) + list(streamed or []) if a.strip() and _cut(a)]
    if cut:
        return Problem("truncated", f"the {name} arguments end before their JSON does "
                                    f"({len(cut[0])} characters: ...{_short(cut[0][-60:], 60)})")
    if isinstance(parsed, schema):
        empty = getattr(parsed, "empty", None)
        why = str(empty()) if callable(empty) else ""
        return Problem("empty", f"the {name} reply is empty: {why}") if why else None
    err = out.get("parsing_error") if isinstance(out, dict) else None
    if err:
        return Problem("invalid", _short(str(err)))
    content = str(getattr(raw, "content", "") or "").strip()
    if content.startswith("{") and _cut(content):
        return Problem("truncated", f"the reply is JSON that ends before it closes ({len(content)} characters)")
    return Problem("invalid", f"the reply did not call {name}")


def reask(messages: list[BaseMessage], schema: type[BaseModel], problem: Problem) -> list[BaseMessage]:
    """The original messages and one more that names the problem (and, when cut, asks for less)."""
    name = schema.__name__
    if problem.kind == "truncated":
        text = (f"Your previous reply was cut off: {problem.detail}. Answer again by calling the {name} tool "
                "with a much shorter reply: at most half as many items, short strings, no repetition.")
    elif problem.kind == "empty":
        text = (f"Your previous reply was empty: {problem.detail}. Answer again by calling the {name} tool "
                "with a real answer: at least one item where a list is asked for.")
    else:
        text = (f"Your previous reply was not valid: {problem.detail}. "
                f"Answer again by calling the {name} tool with arguments that match its schema.")
    return list(messages) + [HumanMessage(text)]
