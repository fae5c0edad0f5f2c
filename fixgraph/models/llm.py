"""The LLM boundary: ChatOpenAI against any OpenAI-compatible server, structured outputs,
token and dollar accounting, and per-task and per-run budgets.

Retries are the OpenAI client's own (``max_retries``): it retries only connection errors,
timeouts, 408/409/429 and 5xx, with exponential backoff and jitter, and honours Retry-After.
Everything else (400, 401, 404, 422) fails at once. A 200 whose body is not a chat completion
(truncated JSON, an HTML page from a proxy, null ``choices``) is retried here the same way, because
the transport garbled the answer: re-asking would tell the model it erred when it did not.

``llm.timeout_s`` bounds a whole try, not only each read: the HTTP client's own timeout is per
read, so a server that trickles its reply a few bytes at a time would otherwise hold a call forever.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import openai

try:  # the HTTP library the OpenAI client is built on: httpx2 in recent versions, httpx before
    import httpx2 as _http  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx as _http  # type: ignore[no-redef]
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel

from fixgraph import redaction
from fixgraph.config import Budget, Price, RunConfig
from fixgraph.state import Usage

T = TypeVar("T", bound=BaseModel)
ModelFactory = Callable[[str], BaseChatModel]
# Called with (tokens, dollars) after every charge, before the reply is used: a durable ledger.
ChargeHook = Callable[[int, float], None]

# What ChatOpenAI raises on a 200 whose body is not a usable chat completion.
_MALFORMED: tuple[type[Exception], ...] = (ValueError, TypeError, openai.APIResponseValidationError)


def backoff_s(retries_taken: int) -> float:
    """The OpenAI client's own schedule: 0.5 s doubling up to 8 s, minus up to 25% jitter."""
    return min(0.5 * 2.0 ** retries_taken, 8.0) * (1 - 0.25 * random.random())


class BudgetExceeded(Exception):
    """The task's (or the run's) token or dollar budget is spent."""


class LLMFailure(Exception):
    """An LLM call failed for good: a non-transient error, retries exhausted, or no valid reply."""


class _DeadlineStream(_http.SyncByteStream):  # pyright: ignore[reportGeneralTypeIssues] - one of two modules
    """A response body that raises a read timeout once the try's deadline has passed."""

    def __init__(self, inner: Any, deadline: float, request: Any):
        self.inner = inner
        self.deadline = deadline
        self.request = request

    def __iter__(self) -> Any:
        for chunk in self.inner:
            if time.monotonic() > self.deadline:
                raise _http.ReadTimeout("the reply did not finish within llm.timeout_s", request=self.request)
            yield chunk

    def close(self) -> None:
        self.inner.close()


_clients: dict[float, Any] = {}
_clients_lock = threading.Lock()


def deadline_client(total_s: float) -> Any:
    """The OpenAI client's default HTTP client, plus a deadline on each request as a whole.

    A timeout raised here is the client's usual timeout, so it retries it like any other. One
    client per deadline for the whole process (the deadline lives on each request, so sharing is
    safe): a client per task would build a TLS context each time, which fault_bench measured at
    +70% wall time and +75 MiB over 150 tasks.
    """
    with _clients_lock:
        if total_s not in _clients:

            def start(request: Any) -> None:
                request.extensions["fixgraph_deadline"] = time.monotonic() + total_s

            def bound(response: Any) -> None:
                deadline = response.request.extensions.get("fixgraph_deadline")
                if deadline is not None:
                    response.stream = _DeadlineStream(response.stream, deadline, response.request)

            _clients[total_s] = openai.DefaultHttpxClient(
                timeout=total_s, event_hooks={"request": [start], "response": [bound]})
        return _clients[total_s]


def make_chat_model(cfg: RunConfig, role: str) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    llm = cfg.llm
    model = getattr(llm.models, role)
    kwargs: dict[str, Any] = {}
    if llm.base_url:
        kwargs["base_url"] = llm.base_url
    return ChatOpenAI(
        model=model,
        api_key=llm.api_key,
        temperature=llm.temperature,
        timeout=llm.timeout_s,
        max_retries=llm.max_retries,
        max_completion_tokens=llm.max_output_tokens,
        http_client=deadline_client(llm.timeout_s),
        use_responses_api=llm.use_responses_api,
        **kwargs,
    )


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

    def charge(self, node: str, model: str, message: BaseMessage | None) -> Usage:
        meta = getattr(message, "usage_metadata", None) or {}
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

    def __init__(self, factory: ModelFactory, meter: Meter, reasks: int = 1, retries: int = 2):
        self.factory = factory
        self.meter = meter
        self.reasks = reasks
        # For malformed 200 replies only; the client retries every other transient fault itself.
        self.retries = retries

    def _invoke(self, runnable: Any, convo: list[BaseMessage], worst_case: float = 0.0) -> Any:
        """One call, budget checked first; malformed replies retried with backoff, all else mapped."""
        detail = ""
        for retries_taken in range(self.retries + 1):
            self.meter.check(worst_case)
            try:
                return runnable.invoke(_redacted(convo))
            except openai.APIStatusError as exc:
                raise LLMFailure(f"LLM server answered {exc.status_code}: {_short(exc.message)}") from None
            except openai.APITimeoutError:
                raise LLMFailure("LLM server timed out (after retries)") from None
            except openai.APIConnectionError as exc:
                raise LLMFailure(f"cannot reach the LLM server: {_short(str(exc))}") from None
            except _MALFORMED as exc:
                detail = f"{type(exc).__name__}: {_short(str(exc))}"
                if retries_taken < self.retries:
                    time.sleep(backoff_s(retries_taken))
        raise LLMFailure(f"LLM server sent no readable reply in {self.retries + 1} tries: {detail}")

    def structured(self, role: str, node: str, schema: type[T],
                   messages: Sequence[BaseMessage], temperature: float | None = None) -> tuple[T, Usage]:
        model = self.factory(role)
        if temperature is not None and "temperature" in type(model).model_fields:
            # Another sample from the same model (the Coder's candidates); a model without the
            # setting (a scripted one) answers as it would.
            model = model.model_copy(update={"temperature": temperature})
        runnable = model.with_structured_output(schema, method="function_calling", include_raw=True)
        usage: Usage = {}
        convo = list(messages)
        last_error = "no reply"
        max_out = int(getattr(model, "max_tokens", None) or 0)
        for _ in range(self.reasks + 1):
            chars = sum(len(str(m.content)) for m in convo)
            out = self._invoke(runnable, convo, self.meter.worst_case(_model_name(model), chars, max_out))
            raw = out.get("raw") if isinstance(out, dict) else None
            from fixgraph.state import merge_usage

            usage = merge_usage(usage, self.meter.charge(node, _model_name(model), raw))
            parsed = out.get("parsed") if isinstance(out, dict) else None
            if isinstance(parsed, schema):
                return parsed, usage
            err = out.get("parsing_error") if isinstance(out, dict) else None
            last_error = _short(str(err)) if err else f"the reply did not call {schema.__name__}"
            convo = list(messages) + [HumanMessage(
                f"Your previous reply was not valid: {last_error}. "
                f"Answer again by calling the {schema.__name__} tool with arguments that match its schema."
            )]
        raise InvalidReply(f"no valid {schema.__name__} from the LLM: {last_error}", usage)


class InvalidReply(LLMFailure):
    def __init__(self, message: str, usage: Usage):
        super().__init__(message)
        self.usage = usage


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


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ai_text(message: AIMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)
