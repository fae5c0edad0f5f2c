"""A scripted chat model: the stand-in for an LLM in tests and offline benchmarks.

Replies are queued per structured-output schema name (``Plan``, ``ExploreStep``, ``CodeChange``,
``RuntimeCheck``, ``PatchJudgment``), so one script drives a whole task whatever order the graph
asks in. A reply is an ``AIMessage`` (use :func:`tool_reply`), a dict of tool arguments, or a
callable taking the prompt messages and returning either. Every prompt is kept in ``seen``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

_ids = itertools.count(1)

Reply = AIMessage | dict[str, Any] | Callable[[Sequence[BaseMessage]], "AIMessage | dict[str, Any]"]


def tool_reply(name: str, args: dict[str, Any], input_tokens: int = 100, output_tokens: int = 20) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"call_{next(_ids)}", "type": "tool_call"}],
        usage_metadata={"input_tokens": input_tokens, "output_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens},
    )


class ScriptExhausted(AssertionError):
    pass


class ScriptedChatModel(BaseChatModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: dict[str, list[Any]] = Field(default_factory=dict)
    model_name: str = "scripted"
    bound_tool: str | None = None
    # Shared between copies made by bind_tools, so the queues and the log are one.
    seen: list[tuple[str, list[BaseMessage]]] = Field(default_factory=list)
    lock: Any = Field(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        tool = tools[0] if tools else None
        name = getattr(tool, "__name__", None) or (tool.get("name") if isinstance(tool, dict) else None)
        return self.model_copy(update={"bound_tool": name})

    def prompts_for(self, tool: str) -> list[str]:
        return ["\n".join(str(m.content) for m in msgs) for name, msgs in self.seen if name == tool]

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        name = self.bound_tool or "text"
        with self.lock:
            self.seen.append((name, list(messages)))
            queue = self.script.get(name)
            if not queue:
                raise ScriptExhausted(f"the script has no more replies for {name}")
            reply = queue.pop(0) if len(queue) > 1 or not callable(queue[0]) else queue[0]
        if callable(reply) and not isinstance(reply, AIMessage):
            reply = reply(messages)
        if isinstance(reply, dict):
            reply = tool_reply(name, reply)
        assert isinstance(reply, AIMessage), f"a scripted reply must be an AIMessage or a dict, not {type(reply)}"
        return ChatResult(generations=[ChatGeneration(message=reply)])
