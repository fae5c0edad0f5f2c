"""The webhook receiver: stdlib ThreadingHTTPServer, answers at once, work goes to the job queue.

  401  signature missing or wrong (nothing is read further, nothing queued)
  400  not JSON, or no X-GitHub-Event header
  413  body over GitHub's 25 MB limit
  204  an event, action, label, repository or commenter the bot does not act on
  202  a job was queued (or was already in flight for that issue)
  200  ping, and GET /healthz
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from bot.events import Ignored, Trigger, from_webhook, verify_signature
from fixgraph.config import ConfigError, GitHubSettings

log = logging.getLogger("fixgraph.bot")
MAX_BODY = 25 * 1024 * 1024


def _json_part(body: bytes, content_type: str) -> bytes:
    """The JSON of a delivery: the body itself, or its ``payload`` field when the webhook was set to
    GitHub's other content type, ``application/x-www-form-urlencoded``."""
    if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        return parse_qs(body.decode("utf-8"), strict_parsing=True)["payload"][0].encode()
    return body


def make_server(gh: GitHubSettings, submit: Callable[[Trigger], bool], host: str | None = None,
                port: int | None = None) -> ThreadingHTTPServer:
    if gh.webhook_secret is None or not gh.webhook_secret.get_secret_value():
        raise ConfigError("GITHUB_WEBHOOK_SECRET is not set: the bot will not accept unsigned webhooks")
    secret = gh.webhook_secret.get_secret_value()

    class Handler(BaseHTTPRequestHandler):
        server_version = "fixgraph-bot"
        protocol_version = "HTTP/1.1"
        # A client that stops sending mid-request frees its thread after this many seconds.
        timeout = 30

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
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                self._reply(400, {"error": "bad Content-Length"})
                return
            if length > MAX_BODY:
                self.close_connection = True
                self._reply(413, {"error": "payload too large"})
                return
            body = self.rfile.read(length)
            if not verify_signature(secret, body, self.headers.get("X-Hub-Signature-256")):
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
            found = from_webhook(event, payload, gh)
            if isinstance(found, Ignored):
                log.info("delivery %s ignored: %s", self.headers.get("X-GitHub-Delivery", "?"), found.reason)
                self._reply(204, note=found.reason)
                return
            queued = submit(found)
            self._reply(202, {"queued": queued, "job": found.key,
                              **({} if queued else {"reason": "a job for this issue is already in flight"})})

    server = ThreadingHTTPServer((host if host is not None else gh.webhook_host,
                                  port if port is not None else gh.webhook_port), Handler)
    server.daemon_threads = True
    return server
