"""Serve a WSGI application on the sandbox's own loopback, then become the test command.

Run inside a test's sandbox, by a tool virtualenv's interpreter that holds the application
(``scoring.execution.services``), as ``python -I -c <this file's text> VAR module:app PATH -- CMD...``:

1. a forked child imports ``module:app`` and serves it on ``127.0.0.1`` (a free port) with
   threads, its output to ``/dev/null`` (the access log is no test output), and dies with its
   parent (``PR_SET_PDEATHSIG``; the jail, PID 1 of the run, ends it anyway);
2. this process waits until ``PATH`` answers 200 there, sets ``VAR`` to the server's URL and execs
   ``CMD``: the tests are this process, and the server their child, gone when they end.

When the server does not answer in time, a ``[fixgraph]`` line says why and ``CMD`` runs without
``VAR``, as it would have without the service. Only the standard library, besides the app.

The server answers as httpbin.org's did for requests' tests: HTTP/1.1 with keep-alive (0.14's
``test_connection_keepalive_and_close`` reads the ``Connection`` header), chunked request bodies
taken (``test_file_post_data``), and, as pytest-httpbin's handler (MIT, ``pytest_httpbin/serve.py``,
the server requests' suite runs against from 2.10 on), no ``text/plain`` content type invented
for a request that has none.
"""

from __future__ import annotations

import ctypes
import importlib
import io
import os
import select
import signal
import socketserver
import sys
import time
import urllib.request
from typing import IO, TYPE_CHECKING, cast
from wsgiref.handlers import SimpleHandler
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from wsgiref.types import ErrorStream

READY_TIMEOUT_S = 60.0  # importing flask on a loaded machine takes seconds
PR_SET_PDEATHSIG = 1


class _ServerHandler(SimpleHandler):
    """One response. The connection stays open after it (``keep_alive``) only when the client
    asked and the response has a length; otherwise its end is the connection's."""

    http_version = "1.1"

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], stderr: ErrorStream, environ: dict[str, str],
                 keep_alive: bool):
        super().__init__(stdin, stdout, stderr, environ, multithread=True, multiprocess=False)
        self.keep_alive = keep_alive

    def cleanup_headers(self) -> None:
        SimpleHandler.cleanup_headers(self)  # a body of one piece gets its Content-Length
        headers = self.headers  # type: ignore[attr-defined]  # set by start_response; typeshed lacks it
        self.keep_alive = self.keep_alive and "Content-Length" in headers
        headers["Connection"] = "keep-alive" if self.keep_alive else "close"


class _Handler(WSGIRequestHandler):
    """Requests on a connection until it closes, as httpbin.org's server (gunicorn) takes them:
    HTTP/1.1 keep-alive, and a chunked request body de-chunked for the app (httpbin answers 501
    to a chunked body on any server but gunicorn, which de-chunks it)."""

    protocol_version = "HTTP/1.1"  # parse_request then keeps a connection open unless told not to
    timeout = 120  # an idle kept-alive connection ends; a test that waits longer reconnects

    def handle(self) -> None:
        self.close_connection = True
        self._one()
        while not self.close_connection:
            self._one()

    def _one(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except TimeoutError:
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():  # it answered the error
            self.close_connection = True
            return
        environ = self.get_environ()
        body = self._body(environ)
        handler = _ServerHandler(io.BytesIO(body), cast(IO[bytes], self.wfile), self.get_stderr(), environ,
                                 keep_alive=not self.close_connection)
        handler.run(self.server.get_app())  # type: ignore[attr-defined]  # a WSGIServer's
        self.close_connection = not handler.keep_alive

    def _body(self, environ: dict[str, str]) -> bytes:
        """The request's whole body, read before the app runs: whatever the app leaves unread
        must not be taken for the next request on the connection."""
        if environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            del environ["HTTP_TRANSFER_ENCODING"]
            chunks = []
            while size := int(self.rfile.readline(65537).split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
            while self.rfile.readline(65537).strip():  # trailers, to the blank line
                pass
            body = b"".join(chunks)
            environ["CONTENT_LENGTH"] = str(len(body))
            return body
        length = environ.get("CONTENT_LENGTH", "")
        return self.rfile.read(int(length)) if length.isdigit() and int(length) > 0 else b""

    def get_environ(self) -> dict[str, str]:
        environ = WSGIRequestHandler.get_environ(self).copy()
        if self.headers.get("content-type") is None:
            del environ["CONTENT_TYPE"]
        return environ

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a streaming test left hanging must not keep the server up


def _serve(target: str, report: int) -> None:
    """In the forked child: import ``target`` (``module:attr``), listen, write the port to ``report``."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    module, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module), attr)
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingServer, handler_class=_Handler)
    os.write(report, f"{server.server_address[1]}\n".encode())
    os.close(report)
    server.serve_forever()


def _started(target: str) -> tuple[int, str]:
    """Fork the server; (its port, "") or (0, why not)."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(read_end)
        try:
            _serve(target, write_end)
        except BaseException as exc:  # noqa: BLE001 - whatever stops the app, the parent reports it
            os.write(write_end, f"error {type(exc).__name__}: {exc}\n".encode(errors="replace"))
        os._exit(1)
    os.close(write_end)
    deadline = time.monotonic() + READY_TIMEOUT_S
    data = b""
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(read_end, 4096) if ready else b""
        if ready and not chunk:
            break
        data += chunk
    os.close(read_end)
    text = data.decode(errors="replace").strip()
    if text.isdigit():
        return int(text), ""
    return 0, text or f"no port within {READY_TIMEOUT_S:g}s"


def _answers(url: str) -> str:
    """"" once ``url`` answers 200, else why not (the last error by the deadline)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    deadline = time.monotonic() + READY_TIMEOUT_S
    why = "no answer"
    while time.monotonic() < deadline:
        try:
            with opener.open(url, timeout=10) as resp:
                if resp.status == 200:
                    return ""
                why = f"HTTP {resp.status}"
        except OSError as exc:
            why = str(exc)
        time.sleep(0.2)
    return why


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        print("[fixgraph] usage: VAR module:app PATH -- CMD...", file=sys.stderr, flush=True)
        os._exit(2)
    var, target, ready, _, *cmd = argv
    port, why = _started(target)
    url = f"http://127.0.0.1:{port}/"
    why = why or _answers(url + ready.lstrip("/"))
    env = dict(os.environ)
    if why:
        print(f"[fixgraph] {target} not served, {var} left unset: {why}", file=sys.stderr, flush=True)
    else:
        env[var] = url
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        print(f"[fixgraph] cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
