"""A loopback stand-in for a small local model behind llama.cpp's (or llama-cpp-python's) server.

What such a server does that the scripted fakes do not, each switchable:

- it serves **one request at a time**: a second request waits until the first generation ends;
- it generates token by token (``token_s`` each) and, when streaming, stops a generation as soon
  as a write fails (the client went away); a non-streamed generation runs to its end whatever the
  client does;
- it reads ``max_tokens`` and ignores ``max_completion_tokens`` (``honour_max_tokens``);
- it enforces the tool schema's ``maxItems`` as a grammar would (``grammar``), and, like
  llama.cpp's grammar parser, uses no grammar at all when any ``maxLength`` in the schema is over
  ``grammar_max_chars`` (1000 for llama-cpp-python 0.3.36: 1001 is refused, measured);
- on the tools in ``loop_tools`` the model loops: it repeats the first item of its list until
  something stops it (``maxItems``, ``max_tokens``, or ``hard_limit`` tokens);
- ``truncate_at`` cuts every tool call's arguments after that many characters yet still reports
  ``finish_reason: tool_calls``, as llama-cpp-python does.

``generations`` records each generation: the tool, when it started and ended, how many tokens it
made, why it ended (done, length, limit, client_gone).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from eval.fakes.llm_server import FakeLLMServer, Responder, completion, sse, stream_chunks


def _tokens(args: dict[str, Any], loop_key: str | None) -> tuple[list[str], list[str]]:
    """The reply's arguments as (tokens before the looped list's end, tokens after it)."""
    if loop_key is None:
        text = json.dumps(args)
        return [text[i: i + 4] for i in range(0, len(text), 4)], []
    items = args.get(loop_key) or ["x"]
    rest = {k: v for k, v in args.items() if k != loop_key}
    tail = "]" + "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in rest.items()) + "}"
    return ["{" + json.dumps(loop_key) + ": [", json.dumps(items[0])], [tail]


def _longest_string_bound(schema: Any) -> int:
    """The largest ``maxLength`` anywhere in a JSON schema (0: none)."""
    if isinstance(schema, dict):
        own = schema.get("maxLength", 0) if isinstance(schema.get("maxLength"), int) else 0
        return max([own, *(_longest_string_bound(v) for v in schema.values())])
    if isinstance(schema, list):
        return max([0, *(_longest_string_bound(v) for v in schema)])
    return 0


class LocalModelServer(FakeLLMServer):
    def __init__(self, responder: Responder, *, token_s: float = 0.0, loop_tools: tuple[str, ...] = (),
                 grammar: bool = True, honour_max_tokens: bool = True, truncate_at: int | None = None,
                 hard_limit: int = 5000, repeat_names: bool = False, grammar_max_chars: int = 1000,
                 context_tokens: int | None = None, port: int = 0):
        super().__init__(responder, port=port)
        # The server's context window (--n_ctx): a longer prompt plus max_tokens is refused, with a
        # 400 when not streaming and, streaming, a 200 whose stream ends before any chunk (what
        # llama-cpp-python 0.3.36's server does: its error is raised after the headers went).
        self.context_tokens = context_tokens
        self.over_context = 0
        # llama-cpp-python 0.3.36 streams a tool call's id, type and name (and the legacy
        # function_call) again in every chunk, not only in the first.
        self.repeat_names = repeat_names
        self.token_s = token_s
        self.loop_tools = loop_tools
        self.grammar = grammar
        self.grammar_max_chars = grammar_max_chars
        self.refused_grammars = 0  # schemas whose grammar the real parser would refuse
        self.honour_max_tokens = honour_max_tokens
        self.truncate_at = truncate_at
        self.hard_limit = hard_limit
        self.generations: list[dict[str, Any]] = []
        self._one = threading.Lock()  # one generation at a time
        self._stopping = threading.Event()

    def busy(self) -> bool:
        return self._one.locked()

    def _limit(self, body: dict[str, Any]) -> int:
        if self.honour_max_tokens and body.get("max_tokens"):
            return int(body["max_tokens"])
        return self.hard_limit

    def _max_items(self, body: dict[str, Any], key: str) -> int | None:
        if not self.grammar:
            return None
        params = body["tools"][0]["function"]["parameters"]
        if not self._grammar_holds(params):
            return None
        props = params.get("properties", {})
        return props.get(key, {}).get("maxItems")

    def _grammar_holds(self, params: dict[str, Any]) -> bool:
        # The real server logs "failed to parse grammar" and generates with no grammar at all.
        return _longest_string_bound(params) <= self.grammar_max_chars

    def handle(self, handler: Any, body: dict[str, Any]) -> None:
        if self.grammar and body.get("tools") and not self._grammar_holds(body["tools"][0]["function"]["parameters"]):
            self.refused_grammars += 1
        if self.context_tokens is not None:
            wanted = len(json.dumps(body.get("messages"))) // 4 + int(body.get("max_tokens") or 0)
            if wanted > self.context_tokens:
                self.over_context += 1
                self._refuse_context(handler, body, wanted)
                return
        found = self.scripted(handler, body)
        if found is None:
            return
        tool, args = found
        loop_key = next((k for k, v in args.items() if isinstance(v, list)), None) \
            if tool in self.loop_tools else None
        with self._one:
            self._generate(handler, body, tool or "text", args, loop_key)

    def _generate(self, handler: Any, body: dict[str, Any], tool: str, args: dict[str, Any],
                  loop_key: str | None) -> None:
        gen: dict[str, Any] = {"tool": tool, "start": time.monotonic(), "tokens": 0, "ended": "done",
                               "stream": bool(body.get("stream"))}
        self.generations.append(gen)
        head, tail = _tokens(args, loop_key)
        limit = self._limit(body)
        max_items = self._max_items(body, loop_key) if loop_key else None
        payload = completion(body.get("model", "fake"), tool, {})
        call = payload["choices"][0]["message"]["tool_calls"][0]
        streamed = gen["stream"]
        if streamed:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.close_connection = True
            first = stream_chunks(payload)[:2]  # the role, then the tool call's name with no arguments
            if not self._write(handler, sse(first).removesuffix(b"data: [DONE]\n\n"), gen):
                return
        text = ""
        items = 1 if loop_key else 0
        queue = list(head)
        while True:
            if not queue:
                if loop_key and (max_items is None or items < max_items):
                    queue.append(", " + json.dumps((args.get(loop_key) or ["x"])[0]))
                    items += 1
                elif tail:
                    queue, tail = tail, []
                else:
                    break
            if gen["tokens"] >= limit:
                gen["ended"] = "length" if limit != self.hard_limit else "limit"
                break
            token = queue.pop(0)
            if self._stopping.wait(self.token_s) if self.token_s else self._stopping.is_set():
                gen["ended"] = "stopped"
                break
            gen["tokens"] += 1
            if self.truncate_at is not None and len(text) + len(token) > self.truncate_at:
                token = token[: max(0, self.truncate_at - len(text))]
                text += token
                if streamed:
                    self._piece(handler, payload, token, gen)
                gen["ended"] = "truncated"
                break
            text += token
            if streamed and not self._piece(handler, payload, token, gen):
                return
        gen["end"] = time.monotonic()
        finish = "length" if gen["ended"] in ("length", "limit") else "tool_calls"
        usage = {"prompt_tokens": len(json.dumps(body.get("messages")))//4, "completion_tokens": gen["tokens"],
                 "total_tokens": 0}
        if streamed:
            base = {k: payload[k] for k in ("id", "object", "created", "model")} | {"object": "chat.completion.chunk"}
            last = [base | {"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]}]
            if (body.get("stream_options") or {}).get("include_usage"):
                last.append(base | {"choices": [], "usage": usage})
            self._write(handler, sse(last), gen)
            return
        call["function"]["arguments"] = text
        payload["choices"][0]["finish_reason"] = finish
        payload["usage"] = usage
        try:
            handler._send(200, payload)
        except OSError:
            gen["delivered"] = False  # generated in full for a client that had gone

    def _refuse_context(self, handler: Any, body: dict[str, Any], wanted: int) -> None:
        message = f"Requested tokens ({wanted}) exceed context window of {self.context_tokens}"
        if body.get("stream"):
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.close_connection = True
            return
        handler._send(400, {"error": {"message": message, "type": "invalid_request_error"}})

    def _piece(self, handler: Any, payload: dict[str, Any], token: str, gen: dict[str, Any]) -> bool:
        base = {k: payload[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        call: dict[str, Any] = {"index": 0, "function": {"arguments": token}}
        delta: dict[str, Any] = {"tool_calls": [call]}
        if self.repeat_names:
            first = payload["choices"][0]["message"]["tool_calls"][0]
            name = first["function"]["name"]
            call |= {"id": first["id"], "type": "function", "function": {"name": name, "arguments": token}}
            delta["function_call"] = {"name": name, "arguments": token}
        chunk = base | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        return self._write(handler, b"data: " + json.dumps(chunk).encode() + b"\n\n", gen)

    def _write(self, handler: Any, data: bytes, gen: dict[str, Any]) -> bool:
        try:
            handler.wfile.write(data)
            handler.wfile.flush()
            return True
        except OSError:
            gen["ended"] = "client_gone"
            gen["end"] = time.monotonic()
            return False

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self
