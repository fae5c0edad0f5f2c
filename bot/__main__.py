"""fixgraph as a GitHub bot.

    python -m bot serve                      # webhook receiver (issues labeled, /fixgraph comments,
                                             # reviews of its own pull requests)
    python -m bot poll --repo owner/name     # the same by polling the REST API

Settings come from ``configs/<name>.toml`` plus ``.env`` / the environment (see .env.example).
Bad settings end with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from types import FrameType

from dotenv import load_dotenv
from github.GithubException import GithubException

from bot.jobs import JobQueue
from bot.poll import Poller
from bot.server import DeliveryLog, make_server
from bot.worker import Worker
from fixgraph import redaction
from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.github.client import GitHubAccess, scrub_environ
from fixgraph.records import redact
from fixgraph.repo.workspace import RepoCache

log = logging.getLogger("fixgraph.bot")


# GitHub's token formats: installation tokens are minted at run time, so they are in no config to
# redact by value; catch them by shape.
TOKEN_SHAPES = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})")


class RedactingFormatter(logging.Formatter):
    """Every log line goes through redaction, whatever library logged it."""

    def __init__(self, secrets: list[str]):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return TOKEN_SHAPES.sub("***", redact(super().format(record), self.secrets))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bot", description="fixgraph's GitHub issue-to-PR bot")
    p.add_argument("--config", default="redo", help="a config name in configs/ or a TOML path")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--no-check", action="store_true",
                   help="start without the preflight (python graph.py --check's checks)")
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="receive webhooks")
    serve.add_argument("--host", help="address to listen on (default FIXGRAPH_WEBHOOK_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default FIXGRAPH_WEBHOOK_PORT or 8787)")
    poll = sub.add_parser("poll", help="poll a repository instead of receiving webhooks")
    poll.add_argument("--repo", required=True, help="owner/name")
    poll.add_argument("--interval", type=float, help="seconds between polls (default 60)")
    poll.add_argument("--once", action="store_true", help="one poll cycle, wait for its jobs, exit")
    return p.parse_args(argv)


def settings(args: argparse.Namespace) -> RunConfig:
    overrides: dict[str, object] = {"eval_mode": False}
    if args.command == "poll":
        if args.repo.count("/") != 1 or not all(args.repo.split("/")):
            raise ConfigError(f"--repo must be owner/name, not {args.repo!r}")
        if args.interval is not None and args.interval <= 0:
            raise ConfigError("--interval must be positive")
    cfg = load_config(args.config, overrides=overrides)
    if args.command == "poll" and not cfg.github.allowlist:
        # Naming the repository on the command line is permission enough.
        cfg = cfg.model_copy(update={"github": cfg.github.model_copy(update={"allowlist": (args.repo,)})})
    if not cfg.github.allowlist:
        raise ConfigError("FIXGRAPH_ALLOWLIST is empty: name the repositories the bot may act on "
                          "(owner/name or owner/*, comma-separated)")
    from fixgraph.models.discover import local_servers, resolve_llm

    cfg, found = resolve_llm(cfg, local_servers())
    if found:
        print(found, file=sys.stderr)
    return cfg


def preflight_fails(cfg: RunConfig) -> bool:
    """The same checks as `graph.py --check`: a bot that cannot call its model or push should say
    so at start, not on the first issue someone labels."""
    from pipeline.preflight import print_report, run_checks

    report: list[str] = []
    if print_report(run_checks(cfg), report.append):
        return False
    for line in report:
        print(f"fixgraph bot: {line}", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_dotenv(override=False)
    try:
        cfg = settings(args)
        access = GitHubAccess(cfg)
    except ConfigError as exc:
        print(f"fixgraph bot: error: {exc}", file=sys.stderr)
        return 2
    # Secrets now live in cfg only; no child process (git, tests, pyright) inherits them.
    scrub_environ()
    redaction.register(cfg.secrets())
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter(cfg.secrets()))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])

    worker = Worker(cfg, access, RepoCache(cfg.cache_dir))
    jobs = JobQueue(worker, workers=cfg.github.max_concurrent_jobs)
    stop = threading.Event()

    if args.command == "serve":
        try:
            server = make_server(cfg.github, jobs.submit, args.host, args.port,
                                 deliveries=DeliveryLog(cfg.cache_dir / "bot" / "deliveries.sqlite"))
        except (ConfigError, OSError) as exc:
            print(f"fixgraph bot: error: {exc}", file=sys.stderr)
            return 2
        if not args.no_check and preflight_fails(cfg):
            server.server_close()
            jobs.close()
            return 2

        def shutdown(signum: int, frame: FrameType | None) -> None:
            threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, shutdown)
        host, port = server.server_address[:2]
        log.info("listening on http://%s:%s (label %r, command %r, %d repositories allowed)",
                 host, port, cfg.github.label, cfg.github.command, len(cfg.github.allowlist))
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        server.server_close()
        log.info("stopped; waiting for %d job(s) in flight", jobs.pending())
        jobs.close(wait=True)
        return 0

    if not args.no_check and preflight_fails(cfg):
        jobs.close()
        return 2
    poller = Poller(cfg, access, args.repo, jobs.submit)
    if args.once:
        try:
            poller.poll_once()
        except GithubException as exc:
            print(f"fixgraph bot: error: GitHub answered {exc.status} while polling {args.repo}", file=sys.stderr)
            return 1
        jobs.wait_idle(timeout=None)
        jobs.close()
        return 0
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    log.info("polling %s every %.0fs", args.repo, args.interval or cfg.github.poll_interval_s)
    try:
        poller.run(stop, args.interval)
    except KeyboardInterrupt:
        pass
    jobs.close(wait=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
