"""The LLM boundary: ChatOpenAI against any OpenAI-compatible server, structured outputs,
token and dollar accounting, per-task and per-run budgets, and what the screen is told.

How a call is retried is fixgraph/models/transport.py's rule; what is wrong with a reply (cut off,
empty, invalid) and the re-ask that says so is fixgraph/models/replies.py's. Each reply is capped at
the node's ``llm.node_output_tokens`` (sent as ``max_tokens`` too, the field most
OpenAI-compatible servers read), and the schemas bound every list and string (fixgraph/state.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel

from fixgraph import phases, redaction
from fixgraph.config import Budget, Price, RunConfig
from fixgraph.models.replies import Problem, StreamedArguments, problem_of, reask
from fixgraph.models.transport import (
    CONNECTION,
    MALFORMED,
    TIMEOUTS,
    CallPolicy,
    backoff_s,
    deadline_client,
    retry_after_s,
    retryable_status,
)
from fixgraph.state import Usage, merge_usage

T = TypeVar("T", bound=BaseModel)
ModelFactory = Callable[[str], BaseChatModel]
# Called with (tokens, dollars) after every charge, before the reply is used: a durable ledger.
ChargeHook = Callable[[int, float], None]
TIMEOUT_KNOB = "llm.timeout_s / FIXGRAPH_LLM_TIMEOUT"


class BudgetExceeded(Exception):
    """The task's (or the run's) token or dollar budget is spent."""


class LLMFailure(Exception):
    """An LLM call failed for good: a non-transient error, retries exhausted, or no valid reply."""

    def __init__(self, message: str, usage: Usage | None = None):
        super().__init__(message)
        self.usage: Usage = usage or {}


class InvalidReply(LLMFailure):
    """No usable structured reply after the re-asks; ``usage`` is what the replies cost."""


@dataclass(frozen=True)
class CallEvent:
    """What the screen is told about one call: ``kind`` is start, done, retry, reask or failed."""

    node: str
    kind: str
    call: int  # the node's call number in this task, from 1
    seconds: float = 0.0  # how long the try (done, retry, failed) took
    cause: str = ""  # why a retry or re-ask: timeout, answered 429, truncated, empty, ...
    detail: str = ""  # e.g. "retry 1/1 in 1.2 s", the tokens a reply cost
    hint: str = ""  # the setting to change, when one would help


EventHook = Callable[[CallEvent], None]


def count(node: str, key: str, n: int = 1) -> Usage:
    """A usage delta that counts ``n`` of ``key`` (timeouts, retries, truncated, empty, invalid, reasks)."""
    return Usage(**{key: n}, by_node={node: {key: n}})  # type: ignore[misc]


_SEEN_LOCK = threading.Lock()
_SEEN_CALLS: OrderedDict[str, set[int]] = OrderedDict()  # completion id -> tool-call indexes seen


def first_mention_only(chunk: dict[str, Any]) -> dict[str, Any]:
    """A streamed chunk with a tool call's ``id``, ``type`` and name kept only where that call
    (completion id, index) first appears. llama-cpp-python's server repeats them in every chunk, and
    LangChain joins repeated names ("PingPing"), so every tool call read as calling no known tool."""
    choices = chunk.get("choices") or []
    key = str(chunk.get("id", ""))
    if not key:
        return chunk
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict) or not isinstance(delta.get("tool_calls"), list):
            continue
        calls: list[Any] = delta["tool_calls"]
        with _SEEN_LOCK:
            seen = _SEEN_CALLS.setdefault(key, set())
            _SEEN_CALLS.move_to_end(key)
            while len(_SEEN_CALLS) > 256:
                _SEEN_CALLS.popitem(last=False)
            fresh = []
            for call in calls:
                if not isinstance(call, dict) or not isinstance(call.get("index"), int):
                    fresh.append(call)
                    continue
                if call["index"] in seen:
                    fn = call.get("function")
                    args = fn.get("arguments") if isinstance(fn, dict) else ""
                    call = {"index": call["index"], "function": {"arguments": args or ""}}
                else:
                    seen.add(call["index"])
                fresh.append(call)
        delta["tool_calls"] = fresh
        if isinstance(delta.get("function_call"), dict):
            delta["function_call"] = None  # the legacy field repeats the same text: tool_calls carry it
    return chunk


def make_chat_model(cfg: RunConfig, role: str) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    class _ChatOpenAI(ChatOpenAI):
        def _convert_chunk_to_generation_chunk(self, chunk: dict, *args: Any, **kwargs: Any) -> Any:
            return super()._convert_chunk_to_generation_chunk(first_mention_only(chunk), *args, **kwargs)

    llm = cfg.llm
    model = getattr(llm.models, role)
    kwargs: dict[str, Any] = {}
    if llm.base_url:
        kwargs["base_url"] = llm.base_url
    if llm.send_max_tokens if llm.send_max_tokens is not None else not llm.openai:
        # ChatOpenAI sends max_completion_tokens, which llama.cpp's and others' servers ignore.
        kwargs["extra_body"] = {"max_tokens": llm.max_output_tokens}
    stream = llm.stream if llm.stream is not None else not llm.openai
    return _ChatOpenAI(
        model=model,
        api_key=llm.api_key,
        temperature=llm.temperature,
        timeout=llm.timeout_s,
        max_retries=0,  # fixgraph/models/transport.py retries
        max_completion_tokens=llm.max_output_tokens,
        http_client=deadline_client(llm.timeout_s),
        use_responses_api=llm.use_responses_api,
        streaming=stream,
        stream_usage=True if stream else None,
        **kwargs,
    )


def capped(model: BaseChatModel, cap: int) -> BaseChatModel:
    """``model`` with its reply capped at ``cap`` tokens (a model without the setting as it is)."""
    if not cap or "max_tokens" not in type(model).model_fields:
        return model
    update: dict[str, Any] = {"max_tokens": cap}
    extra = getattr(model, "extra_body", None)
    if isinstance(extra, Mapping) and "max_tokens" in extra:
        update["extra_body"] = {**extra, "max_tokens": cap}
    return model.model_copy(update=update)


def default_factory(cfg: RunConfig) -> ModelFactory:
    cache: dict[str, BaseChatModel] = {}
    lock = threading.Lock()

    def factory(role: str) -> BaseChatModel:
        with lock:
            if role not in cache:
                cache[role] = make_chat_model(cfg, role)
            return cache[role]

    return factory


class RunMeter:
    """Dollars spent by a whole run, shared by its tasks."""

    def __init__(self, cap: float | None, spent: float = 0.0):
        self.cap = cap
        self.spent = spent
        self._lock = threading.Lock()

    def add(self, dollars: float) -> None:
        with self._lock:
            self.spent += dollars

    def exhausted(self) -> bool:
        return self.cap is not None and self.spent >= self.cap


class Meter:
    """One task's spending. Checked before every call, so a task overshoots by one call at most."""

    def __init__(self, budget: Budget, prices: dict[str, Price], run: RunMeter | None = None,
                 start: Usage | None = None, on_charge: ChargeHook | None = None):
        self.budget = budget
        self.prices = prices
        self.run = run
        self.on_charge = on_charge
        start = start or {}
        self.tokens = start.get("input_tokens", 0) + start.get("output_tokens", 0)
        self.dollars = start.get("dollars", 0.0)
        self._lock = threading.Lock()

    def check(self, next_call_dollars: float = 0.0) -> None:
        """Raise BudgetExceeded when the budget is spent, or when the next call's worst case
        (its prompt plus ``max_output_tokens`` at the model's price) would overrun the task's dollars."""
        if self.tokens >= self.budget.task_tokens:
            raise BudgetExceeded(f"task token budget spent ({self.tokens} of {self.budget.task_tokens})")
        if self.dollars >= self.budget.task_dollars:
            raise BudgetExceeded(f"task dollar budget spent (${self.dollars:.4f} of ${self.budget.task_dollars})")
        if self.run is not None and self.run.exhausted():
            raise BudgetExceeded(f"run dollar budget spent (${self.run.spent:.4f} of ${self.run.cap})")
        if next_call_dollars and self.dollars + next_call_dollars > self.budget.task_dollars:
            raise BudgetExceeded(
                f"task dollar budget nearly spent: the next call may cost up to ${next_call_dollars:.4f}, "
                f"${self.budget.task_dollars - self.dollars:.4f} is left")

    def worst_case(self, model: str, prompt_chars: int, max_output_tokens: int) -> float:
        price = self.prices.get(model, Price())
        # About four characters a token for English and code; a bound, not a count.
        return (prompt_chars / 4 * price.input + max_output_tokens * price.output) / 1_000_000

    def charge(self, node: str, model: str, message: BaseMessage | None, prompt_chars: int = 0) -> Usage:
        """Charge one reply. A server that reports no usage (llama-cpp-python when streaming) is
        charged an estimate, four characters a token, so that the token budget still holds."""
        meta = getattr(message, "usage_metadata", None) or {}
        if message is not None and not meta and prompt_chars:
            out_chars = len(str(message.content or "")) + sum(
                len(json.dumps(c.get("args"))) for c in getattr(message, "tool_calls", None) or [])
            meta = {"input_tokens": prompt_chars // 4, "output_tokens": out_chars // 4}
        # A server cannot refund budget with negative counts.
        tin = max(0, int(meta.get("input_tokens", 0) or 0))
        tout = max(0, int(meta.get("output_tokens", 0) or 0))
        price = self.prices.get(model, Price())
        dollars = (tin * price.input + tout * price.output) / 1_000_000
        with self._lock:
            self.tokens += tin + tout
            self.dollars += dollars
        if self.run is not None:
            self.run.add(dollars)
        if self.on_charge is not None:
            self.on_charge(tin + tout, dollars)
        return Usage(input_tokens=tin, output_tokens=tout, dollars=dollars, calls=1,
                     by_node={node: {"input_tokens": tin, "output_tokens": tout, "dollars": dollars, "calls": 1}})


def _model_name(model: BaseChatModel) -> str:
    return str(getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__)


class LLM:
    """What nodes call. Each call returns the parsed object and the usage it cost."""

    def __init__(self, factory: ModelFactory, meter: Meter, reasks: int = 1, retries: int = 2,
                 policy: CallPolicy | None = None, node_caps: Mapping[str, int] | None = None,
                 on_event: EventHook | None = None):
        self.factory = factory
        self.meter = meter
        self.reasks = reasks
        self.policy = policy or CallPolicy(max_retries=retries, timeout_retries=retries)
        self.node_caps = dict(node_caps or {})
        self.on_event = on_event
        self._calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def _emit(self, event: CallEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _next_call(self, node: str) -> int:
        with self._lock:
            self._calls[node] = self._calls.get(node, 0) + 1
            return self._calls[node]

    def _invoke(self, runnable: Any, convo: list[BaseMessage], node: str,
                worst_case: float = 0.0, streamed: bool = False,
                pieces: StreamedArguments | None = None, unstreamed: Any = None) -> tuple[Any, Usage]:
        """One call, budget checked first, retried by the transport rule; returns the answer and
        the counts of the requests sent and of what went wrong on the way (timeouts, retries).

        ``unstreamed``: the same call without streaming, tried once when a stream ends before its
        first chunk. llama-cpp-python's server answers 200 and then fails (a prompt over its
        context window): only a plain request gets its 400 and the reason, which is final."""
        p = self.policy
        spent: Usage = {}
        tries = {"timeout": 0, "other": 0}
        call = self._next_call(node)
        while True:
            self.meter.check(worst_case)
            self._emit(CallEvent(node, "start", call, detail=f"try {sum(tries.values()) + 1}"))
            t0 = time.monotonic()
            hint = why = ""
            if pieces is not None:
                pieces.args.clear()  # a try's pieces only, not a failed try's
            spent = merge_usage(spent, count(node, "requests"))
            try:
                with phases.phase("llm"):
                    out = runnable.invoke(_redacted(convo), config={"callbacks": [pieces]} if pieces else None)
                if streamed and not _finished(out):
                    # The stream stopped before the server said why it ended: the transport cut it.
                    raise ValueError("the reply stream ended before its last chunk")
                self._emit(CallEvent(node, "done", call, time.monotonic() - t0))
                return out, spent
            except openai.APIStatusError as exc:
                cause = f"answered {exc.status_code}"
                fatal = f"LLM server answered {exc.status_code}: {_short(exc.message)}"
                budget = p.max_retries if retryable_status(exc.status_code) else 0
                wait = retry_after_s(exc)
                kind = "other"
            except TIMEOUTS:
                spent = merge_usage(spent, count(node, "timeouts"))
                n = spent.get("timeouts", 0)
                cause, kind, budget, wait = "timeout", "timeout", p.timeout_retries, None
                hint = TIMEOUT_KNOB
                fatal = (f"LLM server timed out: {n} call(s) of {p.timeout_s:g} s each "
                         f"(a slow server needs a longer {TIMEOUT_KNOB})")
            except CONNECTION as exc:
                cause, kind, budget, wait = "connection", "other", p.max_retries, None
                why = _transport_said(exc)
                fatal = f"cannot reach the LLM server: {why}"
            except MALFORMED as exc:
                if streamed and unstreamed is not None and EMPTY_STREAM in str(exc):
                    self._emit(CallEvent(node, "retry", call, time.monotonic() - t0, "empty stream",
                                         "asking once without streaming, for the server's own error"))
                    spent = merge_usage(spent, count(node, "retries"))
                    runnable, streamed, pieces, unstreamed = unstreamed, False, None, None
                    continue
                cause, kind, budget, wait = "unreadable reply", "other", p.max_retries, None
                why = f"{type(exc).__name__}: {_short(str(exc))}"
                fatal = f"LLM server sent no readable reply in {tries['other'] + 1} tries: {why}"
            seconds = time.monotonic() - t0
            if tries[kind] >= budget:
                self._emit(CallEvent(node, "failed", call, seconds, cause, hint=hint))
                raise LLMFailure(fatal, spent) from None
            if wait is None:
                wait = backoff_s(tries[kind])
                if kind == "timeout":  # time for the server to see the client go
                    wait = max(wait, 1.0)
            tries[kind] += 1
            spent = merge_usage(spent, count(node, "retries"))
            # What the transport said, where the cause alone does not (refused, dropped, cut short).
            said = f" ({why})" if why else ""
            self._emit(CallEvent(node, "retry", call, seconds, cause,
                                 f"retry {tries[kind]}/{budget} in {wait:.1f} s{said}", hint))
            time.sleep(wait)

    def structured(self, role: str, node: str, schema: type[T],
                   messages: Sequence[BaseMessage], temperature: float | None = None) -> tuple[T, Usage]:
        model = capped(self.factory(role), self.node_caps.get(node, 0))
        if temperature is not None and "temperature" in type(model).model_fields:
            # Another sample from the same model (the Coder's candidates); a model without the
            # setting (a scripted one) answers as it would.
            model = model.model_copy(update={"temperature": temperature})
        runnable = model.with_structured_output(schema, method="function_calling", include_raw=True)
        unstreamed = None
        if getattr(model, "streaming", False):
            unstreamed = model.model_copy(update={"streaming": False, "stream_usage": None}) \
                .with_structured_output(schema, method="function_calling", include_raw=True)
        usage: Usage = {}
        convo = list(messages)
        problem: Problem | None = None
        max_out = int(getattr(model, "max_tokens", None) or 0)
        for ask in range(self.reasks + 1):
            chars = sum(len(str(m.content)) for m in convo)
            streamed = bool(getattr(model, "streaming", False))
            pieces = StreamedArguments() if streamed else None
            try:
                out, spent = self._invoke(runnable, convo, node,
                                          self.meter.worst_case(_model_name(model), chars, max_out),
                                          streamed=streamed, pieces=pieces, unstreamed=unstreamed)
            except LLMFailure as exc:
                exc.usage = merge_usage(usage, exc.usage)
                raise
            raw = out.get("raw") if isinstance(out, dict) else None
            usage = merge_usage(merge_usage(usage, spent), self.meter.charge(node, _model_name(model), raw, chars))
            problem = problem_of(schema, out, max_out, pieces.strings() if pieces else None)
            if problem is None:
                return out["parsed"], usage
            usage = merge_usage(usage, count(node, problem.kind))
            if ask < self.reasks:
                usage = merge_usage(usage, count(node, "reasks"))
                self._emit(CallEvent(node, "reask", self._calls.get(node, 0), cause=problem.kind,
                                     detail=problem.detail))
                convo = reask(list(messages), schema, problem)
        line = problem.line() if problem else "no reply"
        raise InvalidReply(f"no valid {schema.__name__} from the LLM: {line}", usage)


# LangChain's words for a stream that ended before its first chunk.
EMPTY_STREAM = "No generations found in stream"


def _finished(out: Any) -> bool:
    raw = out.get("raw") if isinstance(out, dict) else None
    return bool((getattr(raw, "response_metadata", None) or {}).get("finish_reason"))


def _redacted(convo: list[BaseMessage]) -> list[BaseMessage]:
    """The conversation without the run's secrets: test output (hostile) reaches prompts."""
    out = []
    for msg in convo:
        if isinstance(msg.content, str):
            clean = redaction.redact(msg.content)
            if clean != msg.content:
                msg = msg.model_copy(update={"content": clean})
        out.append(msg)
    return out


def _transport_said(exc: BaseException) -> str:
    """The innermost cause of a connection fault, by name: the client's own ("Connection error.")
    says nothing of whether the server refused, dropped or never answered."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return f"{type(exc).__name__}: {_short(str(exc)) or 'no message'}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ai_text(message: AIMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)
