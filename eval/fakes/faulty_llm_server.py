"""A loopback OpenAI-compatible server that misbehaves on purpose, for fault tests and benchmarks.

It answers like :class:`~eval.fakes.llm_server.FakeLLMServer` (scripted tool-call replies), except
that a request may get one of these faults instead:

=============  ================================================================================
rate_limit     429 with ``Retry-After``
server_error   500
drop           200 headers and half the body, then the connection is closed
silent         the request is read and nothing ever comes back (until the client gives up)
trickle        a correct reply sent a few bytes at a time, each piece on time, the whole far too slow
bad_json       200 ``application/json`` whose body is not valid JSON
bad_args       a well-formed reply whose tool call has arguments that do not fit the schema
huge_usage     a correct reply whose usage block reports a huge token count
=============  ================================================================================

Which request gets a fault is decided by a hash of (seed, request key, how many times that key
was asked before), never by arrival order, so a run with many workers gets the same faults per
task whatever the interleaving. The request key is the tool name and the first user message, so
a retry of the same request is the same key's next request. ``schedule`` forces the faults of the
first requests, in order (``None`` for a good reply), for tests of one fault on one task.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eval.fakes.llm_server import FakeLLMServer, Responder, completion, encode

FAULT_KINDS: tuple[str, ...] = ("rate_limit", "server_error", "drop", "silent", "trickle", "bad_json",
                                "bad_args", "huge_usage")
# Faults the OpenAI client retries by itself (with backoff), and faults fixgraph's LLM boundary
# must handle: an unparsable 200 body (retried like a transient fault), wrong arguments (re-asked
# once), a huge usage block (charged, so the budget stops the task before its next call).
TRANSIENT_KINDS: tuple[str, ...] = ("rate_limit", "server_error", "drop", "silent", "trickle", "bad_json")


@dataclass
class FaultPlan:
    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    retry_after: str = "1"
    # How long a silent reply holds the socket; longer than any client timeout in use.
    silent_s: float = 60.0
    # How long a trickled reply takes in all, sent in 20 pieces (each gap shorter than a read timeout).
    trickle_s: float = 60.0
    huge_tokens: int = 50_000_000
    schedule: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = [k for k in [*self.kinds, *self.schedule] if k is not None and k not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds: {', '.join(unknown)} (known: {', '.join(FAULT_KINDS)})")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], not {self.rate}")


def request_key(body: dict[str, Any]) -> str:
    """The tool asked for and the first user message: equal for a request and its retries."""
    tools = body.get("tools") or []
    tool = tools[0]["function"]["name"] if tools else "text"
    first = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "user"), "")
    return tool + ":" + hashlib.sha256(str(first).encode()).hexdigest()[:16]


def _unit(*parts: object) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def wrong_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """The same keys with values of a type no field of ours accepts."""
    return {k: {"wrong": "type"} for k in args} or {"files": {"wrong": "type"}}


class FaultyLLMServer(FakeLLMServer):
    """``with FaultyLLMServer(responder, FaultPlan(rate=0.2, seed=1)) as srv: ...``.

    ``log`` has one entry per chat request: its key, ``tag(body)`` (which task asked, when a tag
    function is given), the model, the time, the fault served (or ``None``) and the usage reported
    in a reply that arrived whole (``None`` when the client got no usable body).
    """

    def __init__(self, responder: Responder, plan: FaultPlan | None = None, usage: tuple[int, int] = (120, 30),
                 port: int = 0, tag: Callable[[dict[str, Any]], str] | None = None):
        super().__init__(responder, usage=usage, port=port)
        self.plan = plan or FaultPlan()
        self.tag = tag
        self.log: list[dict[str, Any]] = []
        self._seen: dict[str, int] = {}
        self._stopping = threading.Event()
        self._schedule = list(self.plan.schedule)

    def choose(self, key: str) -> str | None:
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            if self._schedule:
                return self._schedule.pop(0)
        if not self.plan.kinds or _unit(self.plan.seed, key, n, "rate") >= self.plan.rate:
            return None
        pick = int(_unit(self.plan.seed, key, n, "kind") * len(self.plan.kinds))
        return self.plan.kinds[min(pick, len(self.plan.kinds) - 1)]

    def handle(self, handler: Any, body: dict[str, Any]) -> None:
        key = request_key(body)
        fault = self.choose(key)
        entry: dict[str, Any] = {"key": key, "tag": self.tag(body) if self.tag else "", "model": body.get("model"),
                                 "t": time.monotonic(), "fault": fault, "usage": None}
        with self._lock:
            self.log.append(entry)
        if fault == "rate_limit":
            handler._send(429, {"error": {"message": "injected rate limit", "type": "rate_limit_error"}},
                          {"Retry-After": self.plan.retry_after})
            return
        if fault == "server_error":
            handler._send(500, {"error": {"message": "injected server error", "type": "server_error"}})
            return
        if fault == "silent":
            self._stopping.wait(self.plan.silent_s)
            handler.close_connection = True
            return
        found = self.scripted(handler, body)
        if found is None:
            return
        tool, args = found
        usage = (self.plan.huge_tokens, self.plan.huge_tokens // 10) if fault == "huge_usage" else self.usage
        if fault == "bad_args":
            args = wrong_arguments(args)
        data, ctype = encode(body, completion(body.get("model", "fake"), tool, args, usage=usage))
        if fault in ("drop", "bad_json"):
            cut = data[: len(data) // 2]
            payload = cut if fault == "drop" else cut + b"\x00<not json>"
            handler.send_response(200)
            handler.send_header("Content-Type", ctype)
            handler.send_header("Content-Length", str(len(data) if fault == "drop" else len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            handler.wfile.flush()
            if fault == "drop":
                handler.close_connection = True
                try:
                    handler.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        if fault == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Type", ctype)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            step = max(1, -(-len(data) // 20))
            try:
                for i in range(0, len(data), step):
                    handler.wfile.write(data[i: i + step])
                    handler.wfile.flush()
                    if self._stopping.wait(self.plan.trickle_s / 20):
                        break
                else:
                    entry["usage"] = usage  # the whole reply arrived after all
            except OSError:
                pass  # the client gave up, as it should
            handler.close_connection = True
            return
        entry["usage"] = usage
        handler.send_response(200)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def faults(self) -> dict[str, int]:
        """How many of each fault were served."""
        out: dict[str, int] = {}
        with self._lock:
            for e in self.log:
                if e["fault"]:
                    out[e["fault"]] = out.get(e["fault"], 0) + 1
        return out

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def __enter__(self) -> FaultyLLMServer:
        self.start()
        return self
