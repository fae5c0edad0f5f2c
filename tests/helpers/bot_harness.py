"""A running bot for tests: webhook server, job queue and worker, wired to a fake GitHub."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bot.events import sign
from bot.jobs import JobQueue
from bot.server import DeliveryLog, make_server
from bot.worker import RunFn, Worker
from eval.fakes.github_api import FakeGitHub
from fixgraph.config import RunConfig, load_config
from fixgraph.github.client import GitHubAccess
from fixgraph.repo.workspace import RepoCache

TOKEN = "ghp_webhookSECRETtoken987654321"
SECRET = "hook-secret-abc"


def bot_config(fake: FakeGitHub, tmp: Path, **overrides: Any) -> RunConfig:
    env = {"GITHUB_TOKEN": TOKEN, "GITHUB_BASE_URL": fake.base_url, "GITHUB_WEBHOOK_SECRET": SECRET,
           "FIXGRAPH_ALLOWLIST": "acme/*", "OPENAI_API_KEY": "sk-test-key", "EVAL_MODE": "false"}
    return load_config("redo", env=env, overrides={
        "github.request_pause_s": 0, "github.write_pause_s": 0, "cache_dir": str(tmp / "cache"),
        "runs_dir": str(tmp / "runs"), "predictions_dir": str(tmp / "preds"), **overrides})


class Bot:
    def __init__(self, fake: FakeGitHub, tmp: Path, pipeline: RunFn | None, *, run_kwargs: dict[str, Any] | None = None,
                 dedupe_window_s: float = 30.0, cfg: RunConfig | None = None,
                 deliveries: DeliveryLog | None = None, deadline_s: float = 30.0, **overrides: Any):
        self.cfg = cfg or bot_config(fake, tmp, **overrides)
        self.worker = Worker(self.cfg, GitHubAccess(self.cfg), RepoCache(self.cfg.cache_dir), run_fn=pipeline,
                             run_kwargs=run_kwargs)
        self.jobs = JobQueue(self.worker, workers=2, dedupe_window_s=dedupe_window_s)
        self.server = make_server(self.cfg.github, self.jobs.submit, "127.0.0.1", 0, deliveries=deliveries,
                                  deadline_s=deadline_s)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"

    def post(self, event: str, payload: Any = None, *, raw: bytes | None = None, secret: str | None = SECRET,
             signature: str | None = None, content_type: str = "application/json",
             delivery: str | None = None) -> tuple[int, dict[str, Any] | None]:
        body = raw if raw is not None else json.dumps(payload).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or uuid.uuid4().hex,
                   "Content-Type": content_type}
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        elif secret is not None:
            headers["X-Hub-Signature-256"] = sign(secret, body)
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                data = resp.read()
                return resp.status, json.loads(data) if data else None
        except urllib.error.HTTPError as exc:
            data = exc.read()
            return exc.code, json.loads(data) if data else None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.jobs.close()
