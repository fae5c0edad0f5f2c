"""A loopback OpenAI-compatible server with scripted replies, for tests and offline benchmarks.

It answers ``POST /v1/chat/completions`` as the OpenAI API does: when the request offers tools,
it replies with a tool call whose name is the (first) tool's and whose arguments come from the
script for that name; ``usage`` is reported on every reply. ``GET /v1/models`` lists ``models``.
With ``tools=False`` it plays a model without tool calling: it answers in plain text. Every request (headers included) is
kept in ``requests`` so tests can check what went over the wire (header names lowercased).
A request with ``"stream": true`` gets the same reply as an event stream of chunks (usage in the
last one when ``stream_options.include_usage`` asks for it), as the OpenAI API sends it; with
``ignore_stream=True`` it plays a server that ignores ``stream`` and answers a plain JSON completion.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (tool name, request body) -> tool arguments
Responder = Callable[[str, dict[str, Any]], dict[str, Any]]


class ScriptResponder:
    """Replies per tool name from queues; the last reply of a queue repeats."""

    def __init__(self, script: dict[str, list[dict[str, Any]]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.lock = threading.Lock()

    def __call__(self, tool: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            queue = self.script.get(tool)
            if not queue:
                raise KeyError(f"no scripted reply for {tool}")
            return queue.pop(0) if len(queue) > 1 else queue[0]


def completion(model: str, tool: str | None, args: dict[str, Any] | None, text: str = "",
               usage: tuple[int, int] = (120, 30)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool is not None:
        message["tool_calls"] = [{"id": f"call_{next(_ids)}", "type": "function",
                                  "function": {"name": tool, "arguments": json.dumps(args)}}]
    return {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


_ids = itertools.count(1)


def stream_chunks(payload: dict[str, Any], pieces: int = 3) -> list[dict[str, Any]]:
    """A chat completion as the chunks a streamed reply sends (usage last, in a chunk of its own)."""
    base = {"id": payload["id"], "object": "chat.completion.chunk", "created": payload["created"],
            "model": payload["model"]}
    choice = payload["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": message.get("content") or ""})]
    for i, call in enumerate(message.get("tool_calls") or []):
        args = call["function"]["arguments"]
        out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        step = max(1, -(-len(args) // pieces))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": args[k: k + step]}}]})
                for k in range(0, len(args), step)]
    out.append(chunk({}, choice["finish_reason"]))
    if payload.get("usage"):
        out.append(base | {"choices": [], "usage": payload["usage"]})
    return out


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def encode(body: dict[str, Any], payload: dict[str, Any]) -> tuple[bytes, str]:
    """The reply's bytes and content type: an event stream when the request asked to stream."""
    if body.get("stream"):
        if not (body.get("stream_options") or {}).get("include_usage"):
            payload = {k: v for k, v in payload.items() if k != "usage"}
        return sse(stream_chunks(payload)), "text/event-stream"
    return json.dumps(payload).encode(), "application/json"


class _QuietServer(ThreadingHTTPServer):
    """Its keep-alive connections end with it. Left open, a stopped server's handler threads keep
    answering on them; the process-wide HTTP client (``deadline_client``) reuses such a connection
    when a later server gets the same port, and that server never sees the request."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_sockets: set[Any] = set()
        self.sockets_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.sockets_lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.sockets_lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        with self.sockets_lock:
            left, self.open_sockets = list(self.open_sockets), set()
        for sock in left:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout test) closes the socket under us; that is expected.
        pass


class FakeLLMServer:
    """``with FakeLLMServer(responder) as srv: ChatOpenAI(base_url=srv.base_url, ...)``."""

    def __init__(self, responder: Responder, usage: tuple[int, int] = (120, 30), port: int = 0,
                 models: tuple[str, ...] = ("fake",), tools: bool = True, ignore_stream: bool = False):
        self.responder = responder
        self.ignore_stream = ignore_stream
        self.usage = usage
        self.models = models
        self.tools = tools
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with server._lock:
                    server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": None})
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in server.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
                    return
                with server._lock:
                    server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                server.handle(self, body)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None,
                      body: dict[str, Any] | None = None) -> None:
                """Send ``payload``; a 200 chat completion as an event stream when ``body`` asked to stream."""
                asked = {} if server.ignore_stream else body
                data, ctype = encode(asked, payload) if status == 200 and asked else (
                    json.dumps(payload).encode(), "application/json")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.handler_cls = Handler
        self.httpd = _QuietServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def scripted(self, handler: Any, body: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
        """The tool the request offers and the script's arguments for it; None (after answering
        400, as the API does for a request it cannot serve) when the script has no reply."""
        tools = body.get("tools") or []
        tool = tools[0]["function"]["name"] if tools else None
        try:
            return tool, self.responder(tool or "text", body)
        except KeyError as exc:
            handler._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return None

    def handle(self, handler: Any, body: dict[str, Any]) -> None:
        """Answer one chat completion; subclasses inject faults here."""
        if not self.tools:
            handler._send(200, completion(body.get("model", "fake"), None, None, text="ok", usage=self.usage), body=body)
            return
        found = self.scripted(handler, body)
        if found is not None:
            handler._send(200, completion(body.get("model", "fake"), found[0], found[1], usage=self.usage), body=body)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:  # pragma: no cover - manual use: serve the calc fixture's script
    import argparse

    from eval.fixtures.repos import calc_script

    p = argparse.ArgumentParser(description="Serve scripted chat completions on 127.0.0.1.")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    srv = FakeLLMServer(ScriptResponder(calc_script()), port=args.port).start()
    print(srv.base_url, flush=True)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
