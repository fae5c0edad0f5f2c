"""Attacks from clients: hostile webhook deliveries against the bot's receiver."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from eval.attacks import attack

# ---- webhook ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _webhook(tmp: Path, deadline_s: float = 3.0, log_path: Path | None = None,
             clock: Callable[[], float] = time.time) -> Iterator[tuple[int, list[object], str]]:
    from bot.server import DeliveryLog, make_server
    from fixgraph.config import load_config

    secret = "whsec-bench"
    cfg = load_config("redo", env={"GITHUB_WEBHOOK_SECRET": secret, "FIXGRAPH_ALLOWLIST": "acme/*",
                                   "EVAL_MODE": "false"})
    queued: list[object] = []

    def submit(trigger: object) -> bool:
        queued.append(trigger)
        return True

    log = DeliveryLog(log_path, clock=clock)
    server = make_server(cfg.github, submit, "127.0.0.1", 0, deliveries=log, deadline_s=deadline_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], queued, secret
    finally:
        server.shutdown()
        server.server_close()
        log.close()


def _raw(port: int, data: bytes, read_s: float = 5.0, then: Callable[[socket.socket], None] | None = None) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as s:
        s.sendall(data)
        if then is not None:
            then(s)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _post(port: int, secret: str | None, payload: object, event: str = "issues",
          delivery: str | None = None, timeout: float = 10) -> int:
    from bot.events import sign

    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or uuid.uuid4().hex,
               "Content-Type": "application/json"}
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/webhook", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _labeled(repo: str = "acme/calc") -> dict[str, object]:
    return {"action": "labeled", "label": {"name": "fixgraph"},
            "issue": {"number": 7, "title": "t", "body": "", "labels": [{"name": "fixgraph"}],
                      "user": {"login": "alice", "type": "User"}},
            "repository": {"full_name": repo, "name": repo.split("/")[1], "owner": {"login": repo.split("/")[0]}},
            "sender": {"login": "alice", "type": "User"}}


@attack("webhook", "negative Content-Length with an endless unsigned body")
def _negative_length(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, _):
        start = time.monotonic()

        def flood(s: socket.socket) -> None:
            with contextlib.suppress(OSError):
                for _ in range(64):
                    s.sendall(b"x" * 65536)

        reply = _raw(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n"
                           b"Content-Length: -1\r\n\r\n", then=flood)
        took = time.monotonic() - start
    if not reply.startswith(b"HTTP/1.1 400"):
        return f"answered {reply[:40]!r}"
    return "" if took < 5 and not queued else f"took {took:.1f}s"


@attack("webhook", "huge Content-Length is refused before reading")
def _huge_length(tmp: Path) -> str:
    with _webhook(tmp) as (port, _, _):
        reply = _raw(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n")
    return "" if reply.startswith(b"HTTP/1.1 413") else f"answered {reply[:40]!r}"


@attack("webhook", "a slow client trickles its headers a byte at a time")
def _slowloris(tmp: Path) -> str:
    with _webhook(tmp, deadline_s=2.0) as (port, _, _):
        start = time.monotonic()
        closed_after = None
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for byte in b"POST /webhook HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                try:
                    s.sendall(bytes([byte]))
                    time.sleep(0.2)
                    s.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        if s.recv(1) == b"":
                            raise ConnectionResetError
                    s.setblocking(True)
                except OSError:
                    closed_after = time.monotonic() - start
                    break
    if closed_after is None:
        return "the connection stayed open for 20 s"
    return "" if closed_after < 5 else f"closed after {closed_after:.1f}s"


@attack("webhook", "a burst of 200 deliveries from 20 clients", quick=False)
def _burst(tmp: Path) -> str:
    with _webhook(tmp) as (port, _, secret):
        codes: list[int] = []
        lock = threading.Lock()

        def client() -> None:
            for _ in range(10):
                try:
                    code = _post(port, secret, {"zen": "x"}, event="ping")
                except OSError as exc:
                    code = -1
                    del exc
                with lock:
                    codes.append(code)

        threads = [threading.Thread(target=client) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    bad = [c for c in codes if c != 200]
    return f"{len(bad)} of {len(codes)} deliveries failed ({sorted(set(bad))})" if bad or len(codes) != 200 else ""


@attack("webhook", "a delivery replayed after a restart and a day")
def _replay(tmp: Path) -> str:
    path = tmp / "state" / "deliveries.sqlite"
    delivery = uuid.uuid4().hex
    with _webhook(tmp, log_path=path) as (port, queued, secret):
        first = _post(port, secret, _labeled(), delivery=delivery)
    later = time.time() + 24 * 3600
    with _webhook(tmp, log_path=path, clock=lambda: later) as (port, queued2, secret):
        again = _post(port, secret, _labeled(), delivery=delivery)
    if first != 202 or len(queued) != 1:
        return f"the first delivery was not queued ({first})"
    return f"the replay ran another job ({again})" if queued2 else ""


@attack("signatures", "unsigned and wrongly signed deliveries")
def _signatures(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, _):
        codes = [_post(port, None, _labeled()), _post(port, "wrong-secret", _labeled())]
    return "" if codes == [401, 401] and not queued else f"answered {codes}, queued {len(queued)}"


@attack("allowlist", "a delivery for a repository outside the allowlist")
def _allowlist(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, secret):
        code = _post(port, secret, _labeled("evil/repo"))
    return "" if code == 204 and not queued else f"answered {code}, queued {len(queued)}"


