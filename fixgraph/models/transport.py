"""How one call reaches the server and what happens when it fails: the HTTP client with a
deadline per try, and the retry rule.

The retries are fixgraph's own (the OpenAI client's are off), so that a timeout can be treated
apart from the rest:

- 408/409/429 and 5xx, connection errors, and a 200 whose body is not a chat completion (the
  transport garbled it: re-asking would tell the model it erred when it did not) are retried up to
  ``llm.max_retries`` times with exponential backoff and jitter, honouring Retry-After;
- a timeout is retried up to ``llm.timeout_retries`` times (by default once for a local server,
  whose queue is one request deep: a retry waits behind the generation it abandoned), after a
  pause of at least a second. Replies are streamed to servers other than OpenAI's, so that closing
  a timed-out request stops the server's generation instead of leaving it running;
- anything else (400, 401, 404, 422) fails at once.

``llm.timeout_s`` bounds a whole try, not only each read: the HTTP client's own timeout is per
read, so a server that trickles its reply a few bytes at a time would otherwise hold a call forever.

Some OpenAI-compatible servers ignore ``stream`` and answer a streamed request with a plain JSON
chat completion. The client would read that body as an event stream with no events (an empty
reply) and ask again; here such a reply is turned into the stream it stands for, so it is read
once, as the completion it is. Anything else in a JSON body is left as it came.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import openai

try:  # the HTTP library the OpenAI client is built on: httpx2 in recent versions, httpx before
    import httpx2 as _http  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the installed openai
    import httpx as _http  # type: ignore[no-redef]

from fixgraph.config import LLMSettings

# What ChatOpenAI raises on a 200 whose body is not a usable chat completion.
MALFORMED: tuple[type[Exception], ...] = (ValueError, TypeError, openai.APIResponseValidationError)
TIMEOUTS: tuple[type[Exception], ...] = (openai.APITimeoutError, _http.TimeoutException)
# A timeout is one of these too: catch TIMEOUTS first.
CONNECTION: tuple[type[Exception], ...] = (openai.APIConnectionError, _http.TransportError)
RETRY_AFTER_MAX_S = 60.0
# A chat completion read whole to turn it into a stream; a larger body is passed on as it came.
COMPLETION_MAX_BYTES = 32 * 1024 * 1024


def backoff_s(retries_taken: int) -> float:
    """0.5 s doubling up to 8 s, minus up to 25% jitter (the OpenAI client's own schedule)."""
    return min(0.5 * 2.0 ** retries_taken, 8.0) * (1 - 0.25 * random.random())


def retryable_status(code: int) -> bool:
    return code in (408, 409, 429) or code >= 500


def retry_after_s(exc: openai.APIStatusError) -> float | None:
    """The server's Retry-After in seconds (a number of seconds only), when sane."""
    raw = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        wait = float(raw) if raw is not None else None
    except ValueError:
        return None
    return wait if wait is not None and 0 <= wait <= RETRY_AFTER_MAX_S else None


@dataclass(frozen=True)
class CallPolicy:
    """The retry rule of one run, from ``llm`` settings."""

    timeout_s: float = 120.0
    max_retries: int = 2
    timeout_retries: int = 2
    local: bool = False

    @classmethod
    def of(cls, llm: LLMSettings) -> CallPolicy:
        return cls(timeout_s=llm.timeout_s, max_retries=llm.max_retries,
                   timeout_retries=llm.retries_after_timeout(), local=llm.local)


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


def completion_chunks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the chunks of a streamed reply: per choice its role, text and whole tool
    calls, then its finish reason; the usage last, in a chunk of its own, as OpenAI sends it."""
    base = {k: payload[k] for k in ("id", "created", "model", "system_fingerprint") if k in payload}
    base["object"] = "chat.completion.chunk"
    out: list[dict[str, Any]] = []
    for n, choice in enumerate(payload["choices"]):
        index = choice.get("index", n)
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": message.get("role") or "assistant", "content": message.get("content") or ""}
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(calls) if isinstance(call, dict)]
        out.append(base | {"choices": [{"index": index, "delta": delta, "finish_reason": None}]})
        out.append(base | {"choices": [{"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if isinstance(payload.get("usage"), dict):
        out.append(base | {"choices": [], "usage": payload["usage"]})
    return out


def _completion(body: bytes) -> dict[str, Any] | None:
    """``body`` as a chat completion with choices, or None."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in payload["choices"]):
        return None
    return payload


class _CompletionAsStream(_http.SyncByteStream):  # pyright: ignore[reportGeneralTypeIssues] - one of two modules
    """A JSON reply to a streamed request, as the event stream the client reads: a chat completion
    becomes its chunks; any other body passes unchanged (the client finds no events in it)."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __iter__(self) -> Any:
        body = bytearray()
        for chunk in self.inner:
            body += chunk
            if len(body) > COMPLETION_MAX_BYTES:
                yield bytes(body)
                yield from self.inner
                return
        payload = _completion(bytes(body))
        if payload is None:
            yield bytes(body)
            return
        yield b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in completion_chunks(payload))
        yield b"data: [DONE]\n\n"

    def close(self) -> None:
        self.inner.close()


def _asks_stream(request: Any) -> bool:
    try:
        body = json.loads(request.content or b"{}")
    except (ValueError, UnicodeDecodeError, _http.RequestNotRead):
        return False
    return isinstance(body, dict) and body.get("stream") is True


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
                request.extensions["fixgraph_stream"] = _asks_stream(request)

            def bound(response: Any) -> None:
                deadline = response.request.extensions.get("fixgraph_deadline")
                if deadline is not None:
                    response.stream = _DeadlineStream(response.stream, deadline, response.request)
                ctype = response.headers.get("content-type", "")
                if (response.request.extensions.get("fixgraph_stream") and response.status_code == 200
                        and ctype.split(";")[0].strip().lower() == "application/json"):
                    response.stream = _CompletionAsStream(response.stream)

            _clients[total_s] = openai.DefaultHttpxClient(
                timeout=total_s, event_hooks={"request": [start], "response": [bound]})
        return _clients[total_s]


def close_clients() -> None:
    """Close the process's HTTP clients and forget them; the next call makes new ones. For a
    process that outlives the servers it talked to (the test suite starts one per test): a pooled
    connection to a stopped server's port is never offered to the next server on that port."""
    with _clients_lock:
        left = list(_clients.values())
        _clients.clear()
    for client in left:
        client.close()
