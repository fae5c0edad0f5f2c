"""The webhook receiver: stdlib ThreadingHTTPServer, answers at once, work goes to the job queue.

  401  signature missing or wrong (nothing is read further, nothing queued)
  400  not JSON, no X-GitHub-Event header, or a Content-Length that is not a number >= 0
  411  no Content-Length (a chunked body is refused rather than read without a bound)
  413  body over GitHub's 25 MB limit (answered before reading any of it)
  204  an event, action, label, repository, commenter or PR (one it did not open, closed, approved)
       the bot does not act on
  202  a job was queued (or was already in flight for that issue; a revision asked for while its PR's
       job runs is held for one more round)
  200  ping, GET /healthz, and a delivery id already seen (GitHub's redelivery: no second job)

Clients are hostile until the signature says otherwise: each connection gets one request and
``REQUEST_DEADLINE_S`` for all of it (headers and body, however slowly they trickle in), and the
listen backlog is deep enough for GitHub's bursts.
"""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from bot.events import Ignored, Job, from_webhook, verify_signature
from fixgraph.config import ConfigError, GitHubSettings

log = logging.getLogger("fixgraph.bot")
MAX_BODY = 25 * 1024 * 1024
REQUEST_DEADLINE_S = 30.0
LISTEN_BACKLOG = 256
# GitHub lets a delivery be redelivered (by hand or by API) for 3 days; keep ids a little longer.
DELIVERY_RETENTION_S = 8 * 24 * 3600


class DeliveryLog:
    """Delivery ids (``X-GitHub-Delivery``) already acted on, in SQLite so that a restart keeps them."""

    def __init__(self, path: Path | None, retention_s: float = DELIVERY_RETENTION_S,
                 clock: Callable[[], float] = time.time):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.retention_s = retention_s
        self.clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path) if path is not None else ":memory:", check_same_thread=False,
                                   timeout=30, isolation_level=None)
        self._db.execute("CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, seen REAL NOT NULL)")

    def first_time(self, delivery: str) -> bool:
        """Record ``delivery``; False when it was recorded before (within the retention)."""
        now = self.clock()
        with self._lock:
            self._db.execute("DELETE FROM deliveries WHERE seen < ?", (now - self.retention_s,))
            cur = self._db.execute("INSERT OR IGNORE INTO deliveries (id, seen) VALUES (?, ?)", (delivery[:200], now))
            return cur.rowcount == 1

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


def _json_part(body: bytes, content_type: str) -> bytes:
    """The JSON of a delivery: the body itself, or its ``payload`` field when the webhook was set to
    GitHub's other content type, ``application/x-www-form-urlencoded``."""
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        return parse_qs(body.decode("utf-8"), strict_parsing=True)["payload"][0].encode()
    return body


class WebhookHandler(BaseHTTPRequestHandler):
    """One webhook request per connection; :func:`make_server` gives a subclass its settings."""
    gh: GitHubSettings
    secret: str
    seen: DeliveryLog
    submit: Callable[[Job], bool]
    deadline_s: float = REQUEST_DEADLINE_S
    server_version = "fixgraph-bot"
    protocol_version = "HTTP/1.1"
    # A client that stops sending mid-request frees its thread after this many seconds...
    timeout: float | None = REQUEST_DEADLINE_S

    def setup(self) -> None:
        super().setup()
        # ...and one that keeps sending a byte at a time is cut at the deadline all the same.
        self._deadline = threading.Timer(self.deadline_s, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        self._deadline.cancel()
        try:
            super().finish()
        except OSError:
            pass

    def handle(self) -> None:
        self.close_connection = True
        try:
            self.handle_one_request()  # one request per connection: the deadline bounds it
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        log.debug("%s %s", self.address_string(), format % args)

    def _reply(self, status: int, payload: dict[str, Any] | None = None, note: str = "") -> None:
        data = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        if note:
            self.send_header("X-Fixgraph-Note", note[:200].encode("ascii", "replace").decode())
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")  # one request per connection (the deadline)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") == "/healthz":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        try:
            self._post()
        except Exception as exc:  # answer rather than drop the connection; GitHub shows the 500
            log.error("webhook handler failed: %s", type(exc).__name__)
            self._reply(500, {"error": "internal error"})

    def _post(self) -> None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            self._reply(411, {"error": "Content-Length required"})
            return
        try:
            length = int(raw.strip())
        except ValueError:
            length = -1
        if length < 0 or not raw.strip().isdigit():
            self._reply(400, {"error": "bad Content-Length"})
            return
        if length > MAX_BODY:
            self._reply(413, {"error": "payload too large"})
            return
        body = self.rfile.read(length)
        if len(body) != length:
            return  # the client went away, or the deadline cut it
        if not verify_signature(self.secret, body, self.headers.get("X-Hub-Signature-256")):
            log.warning("webhook from %s refused: bad or missing signature", self.address_string())
            self._reply(401, {"error": "bad or missing X-Hub-Signature-256"})
            return
        event = self.headers.get("X-GitHub-Event")
        if not event:
            self._reply(400, {"error": "no X-GitHub-Event header"})
            return
        try:
            payload = json.loads(_json_part(body, self.headers.get("Content-Type", "")))
        except (ValueError, KeyError):  # bad JSON, bad UTF-8, bad form encoding, no payload field
            self._reply(400, {"error": "body is not JSON"})
            return
        if event == "ping":
            self._reply(200, {"ok": True, "pong": True})
            return
        delivery = self.headers.get("X-GitHub-Delivery")
        if delivery and not self.seen.first_time(delivery):
            log.info("delivery %s already handled; redelivery ignored", delivery[:80])
            self._reply(200, {"queued": False, "reason": "delivery already handled"})
            return
        found = from_webhook(event, payload, self.gh)
        if isinstance(found, Ignored):
            log.info("delivery %s ignored: %s", self.headers.get("X-GitHub-Delivery", "?"), found.reason)
            self._reply(204, note=found.reason)
            return
        queued = self.submit(found)
        self._reply(202, {"queued": queued, "job": found.key,
                          **({} if queued else {"reason": "a job for this issue is already in flight"})})


def make_server(gh: GitHubSettings, submit: Callable[[Job], bool], host: str | None = None,
                port: int | None = None, deliveries: DeliveryLog | None = None,
                deadline_s: float = REQUEST_DEADLINE_S) -> ThreadingHTTPServer:
    """The webhook server. ``deliveries``: where seen delivery ids persist (default: memory only)."""
    if gh.webhook_secret is None or not gh.webhook_secret.get_secret_value():
        raise ConfigError("GITHUB_WEBHOOK_SECRET is not set: the bot will not accept unsigned webhooks")
    secret = gh.webhook_secret.get_secret_value()
    seen = deliveries or DeliveryLog(None)

    handler = type("Handler", (WebhookHandler,), {
        "gh": gh, "secret": secret, "seen": seen, "submit": staticmethod(submit),
        "deadline_s": deadline_s, "timeout": deadline_s})
    return _Server((host if host is not None else gh.webhook_host, port if port is not None else gh.webhook_port),
                   handler)
