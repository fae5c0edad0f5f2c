"""Polling, for teams that cannot expose a webhook: the same triggers, read from the REST API.

Each cycle reads the repository's issue events newer than the last one seen (``labeled`` with the
bot's label) and issue comments created since the last cycle (the command); on the bot's own open
pull requests, the reviews, line comments and ``/fixgraph`` comments newer than the last seen ask
for a revision. Items are matched by id, so an old comment edited since is never read again. Cursors are kept in
``<cache_dir>/bot/poll-<owner>+<name>.json`` so a restart neither replays history nor misses what
happened while it was down. On the very first cycle there is no cursor: open issues that carry
the label and have no comment from the bot yet are picked up, nothing older.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from github.GithubException import GithubException

from bot.events import (
    Ignored,
    Job,
    Revision,
    comment_trigger,
    is_bot_pr,
    label_trigger,
    revision_trigger,
)
from fixgraph.config import RunConfig
from fixgraph.github.client import GitHubAccess
from fixgraph.github.pr import MARKER, MAX_PRS_SCANNED
from fixgraph.records import atomic_write

log = logging.getLogger("fixgraph.bot")


def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Poller:
    def __init__(self, cfg: RunConfig, access: GitHubAccess, repo: str, submit: Callable[[Job], bool],
                 state_dir: Path | None = None):
        self.cfg = cfg
        self.access = access
        self.repo_name = repo
        self.submit = submit
        self.state_path = (state_dir or cfg.cache_dir / "bot") / f"poll-{repo.replace('/', '+')}.json"

    def _load(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _save(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_path, json.dumps(state, indent=2) + "\n")

    def poll_once(self) -> list[Job]:
        """One cycle; returns the triggers it found (each also handed to ``submit``)."""
        gh = self.cfg.github
        started = dt.datetime.now(dt.UTC)
        repo = self.access.session(repo=self.repo_name).gh.get_repo(self.repo_name)
        state = self._load()
        found: list[Job | Ignored] = []
        bot_prs = self._bot_prs(repo)
        newest_event = state["event_id"] if state else 0
        for event in repo.get_issues_events():  # newest first
            if state is not None and event.id <= state["event_id"]:
                break
            newest_event = max(newest_event, event.id)
            if state is None:
                break  # first cycle: only the cursor; the backlog comes from open labeled issues below
            if event.event == "labeled" and event.label is not None and event.issue.pull_request is None:
                found.append(label_trigger(self.repo_name, event.issue.number, event.label.name,
                                           event.actor.login if event.actor else "", gh))
        if state is None:
            for issue in repo.get_issues(state="open", labels=[gh.label]):
                if issue.pull_request is None and not any(MARKER in (c.body or "") for c in issue.get_comments()):
                    found.append(label_trigger(self.repo_name, issue.number, gh.label, issue.user.login, gh))
        newest_comment = state["comment_id"] if state else 0
        if state is not None:
            since = dt.datetime.fromisoformat(state["comments_since"].replace("Z", "+00:00"))
            for c in repo.get_issues_comments(sort="created", direction="asc", since=since):
                if c.id <= state["comment_id"]:
                    continue
                newest_comment = max(newest_comment, c.id)
                number = int(c.issue_url.rstrip("/").rsplit("/", 1)[1])
                if number in bot_prs:
                    found.append(revision_trigger(self.repo_name, bot_prs[number], "comment", c.body, c.user.login,
                                                  c.author_association, gh, comment_id=c.id))
                else:
                    found.append(comment_trigger(self.repo_name, number, c.body, c.user.login,
                                                 c.author_association, gh))
        cursors = self._reviews(repo, bot_prs, state, found)
        triggers = self._one_per_key(found)
        # The cursor moves only after the whole cycle read cleanly, so a failed cycle is redone.
        # Comments are also matched by id, so the overlap only absorbs clock skew with GitHub.
        since_next = started - dt.timedelta(minutes=2)
        self._save({"event_id": newest_event, "comment_id": newest_comment, "comments_since": _iso(since_next),
                    **cursors})
        for t in triggers:
            self.submit(t)
        return triggers

    def _one_per_key(self, found: list[Job | Ignored]) -> list[Job]:
        """Events come newest-first; a label added twice is two events, one job. The revisions a
        cycle finds on one PR make one round that answers them all."""
        jobs: dict[str, Job] = {}
        for item in found:
            if isinstance(item, Ignored):
                log.debug("poll %s: ignored: %s", self.repo_name, item.reason)
                continue
            first = jobs.get(item.key)
            if first is None:
                jobs[item.key] = item
            elif isinstance(first, Revision) and isinstance(item, Revision):
                jobs[item.key] = dataclasses.replace(first, more=(*first.more, item))
        return list(jobs.values())

    def _bot_prs(self, repo: Any) -> dict[int, dict[str, Any]]:
        """The bot's open pull requests, as GitHub sends them, by number."""
        out: dict[int, dict[str, Any]] = {}
        for seen, pr in enumerate(repo.get_pulls(state="open", sort="created", direction="desc")):
            if seen >= MAX_PRS_SCANNED:
                break
            # From the listing's own fields: raw_data would fetch each PR again.
            raw = {"number": pr.number, "state": pr.state, "merged_at": pr.merged_at, "body": pr.body,
                   "user": {"login": pr.user.login}, "head": {"ref": pr.head.ref}}
            if is_bot_pr(raw, self.cfg.github):
                out[pr.number] = raw
        return out

    def _reviews(self, repo: Any, bot_prs: dict[int, dict[str, Any]], state: dict[str, Any] | None,
                 found: list[Job | Ignored]) -> dict[str, Any]:
        """Reviews and line comments on the bot's PRs newer than the cursors (only the cursors on
        the first cycle); returns the cursors to save."""
        gh = self.cfg.github
        cur = state or {}
        first = "review_id" not in cur
        review_id, line_id = int(cur.get("review_id", 0)), int(cur.get("review_comment_id", 0))
        newest_review, newest_line = review_id, line_id
        for number, raw in bot_prs.items():
            for review in repo.get_pull(number).get_reviews():
                newest_review = max(newest_review, review.id)
                if first or review.id <= review_id or str(review.state).upper() == "APPROVED":
                    continue
                found.append(revision_trigger(self.repo_name, raw, "review", review.body, review.user.login,
                                              review.author_association, gh))
        since = {} if first else {"since": dt.datetime.fromisoformat(cur["comments_since"].replace("Z", "+00:00"))}
        for c in repo.get_pulls_review_comments(sort="created", direction="asc", **since):
            newest_line = max(newest_line, c.id)
            number = int(c.pull_request_url.rstrip("/").rsplit("/", 1)[1])
            if first or c.id <= line_id or number not in bot_prs:
                continue
            line = c.line or c.original_line
            found.append(revision_trigger(self.repo_name, bot_prs[number], "review_comment", c.body, c.user.login,
                                          c.author_association, gh, path=c.path,
                                          line=line if isinstance(line, int) else None, comment_id=c.id))
        return {"review_id": newest_review, "review_comment_id": newest_line}

    def run(self, stop: threading.Event, interval: float | None = None) -> None:
        interval = interval or self.cfg.github.poll_interval_s
        while not stop.is_set():
            try:
                self.poll_once()
            except GithubException as exc:
                log.warning("poll %s: GitHub answered %s; trying again in %.0fs", self.repo_name, exc.status, interval)
            except OSError as exc:
                log.warning("poll %s: cannot reach GitHub (%s); trying again in %.0fs", self.repo_name,
                            type(exc).__name__, interval)
            stop.wait(interval)
