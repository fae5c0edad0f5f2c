"""A revision of the bot's own pull request: a review's words become one more run of the graph.

The run starts at the PR branch's head (a maintainer's own commits there included), with the
issue, the PR's current diff and the reviewer's words as the brief the Planner, the Coder and the
Critic's judge read; the first round's reproduction test is kept for the Critic. The result is one
more commit on the same branch (fixgraph/github/revision.py), and a reply says what changed or why
nothing did. Every check on the PR is made again here, on the PR as GitHub has it now: the event
that queued the job may be old.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, Protocol

import git
from github.GithubException import GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository

from bot.events import Revision, is_bot_pr
from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from fixgraph.github.client import GitHubAccess, Session
from fixgraph.github.pr import MARKER, CloneError, _templates
from fixgraph.github.revision import REVISION_MARKER, RevisionPublisher
from fixgraph.records import RunStore
from fixgraph.repo.workspace import RepoCache
from fixgraph.state import TaskState

log = logging.getLogger("fixgraph.bot")


class WorkerLike(Protocol):
    """What a revision uses of bot.worker.Worker (which calls this module: no import back)."""

    cfg: RunConfig
    access: GitHubAccess
    repo_cache: RepoCache
    run_kwargs: dict[str, Any]

    def runner(self) -> Callable[..., dict[str, Any]]: ...
    def fetch_base(self, repo: Repository, session: Session, branch: str | None = None,
                   url: str | None = None) -> str: ...
    def instance(self, repo: Repository, issue: Any, base: str) -> Task: ...
    def store(self, instance: Task) -> RunStore: ...
    def _redact(self, text: str, session: Session | None = None) -> str: ...

# The PR's diff as the brief shows it; a larger one is cut (and says so) so the issue and the
# review keep their place in the prompt.
MAX_DIFF_CHARS = 20_000
BRANCH_ISSUE = re.compile(r"^fixgraph/(\d+)-")


def revision_count(pr: PullRequest) -> int:
    """Rounds this PR had: the bot's replies (by the PR's author, the bot) that close a round."""
    author = pr.user.login.lower()
    replies = [*pr.get_issue_comments(), *pr.get_review_comments()]
    return sum(1 for c in replies if REVISION_MARKER in (c.body or "") and c.user.login.lower() == author)


def refusal(worker: WorkerLike, repo: Repository, pr: PullRequest) -> str:
    """Why this PR is not one to revise ("" when it is)."""
    if pr.state != "open" or pr.merged:
        return "the pull request is closed or merged"
    if not is_bot_pr(pr.raw_data, worker.cfg.github) or not BRANCH_ISSUE.match(pr.head.ref):
        return "the pull request was not opened by fixgraph"
    head_owner = worker.cfg.github.fork_owner or repo.owner.login
    if pr.head.label.split(":")[0].lower() != head_owner.lower():
        return f"the pull request's branch is not in {head_owner}'s repository"
    return ""


def cut_diff(diff: str, limit: int = MAX_DIFF_CHARS) -> str:
    if len(diff) <= limit:
        return diff
    return diff[:limit] + f"\n[cut: the diff is {len(diff)} characters; the first {limit} are shown]"


def brief(issue: str, pr: PullRequest, diff: str, rev: Revision) -> str:
    return _templates().get_template("revision.md.j2").render(
        issue=issue.rstrip(), pr_number=pr.number, branch=pr.head.ref, base=pr.base.ref, diff=cut_diff(diff),
        requests=rev.requests())


def kept_repro(worker: WorkerLike, instance_id: str) -> dict[str, Any] | None:
    """The reproduction test the newest earlier run on this issue accepted, from its record."""
    for path in sorted(worker.cfg.runs_dir.glob(f"bot-{instance_id}-*/records/*.json"), reverse=True):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        repro = record.get("repro") if isinstance(record, dict) else None
        if isinstance(repro, dict) and repro.get("status") == "accepted":
            return repro
    return None


def reply(worker: WorkerLike, pr: PullRequest, rev: Revision, session: Session, text: str,
          closes_round: bool = False) -> None:
    """Answer in the line comment's thread, or on the PR for a review or a PR comment."""
    body = worker._redact(text, session) + "\n\n" + MARKER + (f"\n{REVISION_MARKER}" if closes_round else "")
    try:
        if rev.reason == "review_comment" and rev.comment_id is not None:
            pr.create_review_comment_reply(rev.comment_id, body)
        else:
            pr.create_issue_comment(body)
    except GithubException as exc:
        log.warning("could not reply on %s: %s", rev.key, exc.status)


def askers(rev: Revision) -> str:
    return ", ".join(dict.fromkeys(f"@{r.sender}" for r in rev.requests()))


def outcome_text(rev: Revision, record: dict[str, Any]) -> str:
    published = record.get("published") or {}
    if published.get("ok"):
        score = record.get("fix_score") or {}
        value = score.get("fix_score")
        value_text = f"{float(value):.2f}" if value is not None else "n/a"
        change = next((a.get("explanation") for a in record.get("attempts", [])
                       if a.get("number") == published.get("attempt")), "") or "(no explanation given)"
        return (f"fixgraph revised this pull request as {askers(rev)} asked: commit {published['commit'][:12]} "
                f"on `{published['branch']}`.\n\n{' '.join(str(change).split())[:600]}\n\n"
                f"Critic verdict: {record.get('verdict') or 'NoVerdict'}; fix_score {value_text} "
                f"({score.get('kind', 'none')}).")
    reason = published.get("reason") or record.get("failed") or record.get("stop_reason") or "no patch"
    return f"fixgraph made no new commit for the review by {askers(rev)}: {reason}."


def revise(worker: WorkerLike, rev: Revision) -> dict[str, Any] | None:
    try:
        session = worker.access.session(rev.installation_id, rev.repo)
        repo = session.gh.get_repo(rev.repo)
        pr = repo.get_pull(rev.number)
    except GithubException as exc:
        log.warning("%s: GitHub answered %s; revision dropped", rev.key, exc.status)
        return None
    why = refusal(worker, repo, pr)
    if why:
        log.info("%s: %s; revision ignored", rev.key, why)
        return None
    limit = worker.cfg.github.max_revisions
    if revision_count(pr) >= limit:
        reply(worker, pr, rev, session, f"fixgraph has revised this pull request {limit} times, the limit "
              "(`github.max_revisions`); nothing was run for this review.")
        return None
    try:
        repo.get_branch(pr.head.ref)
    except GithubException as exc:
        if exc.status != 404:
            log.warning("%s: GitHub answered %s on the branch; revision dropped", rev.key, exc.status)
            return None
        reply(worker, pr, rev, session, f"fixgraph cannot revise this pull request: its branch `{pr.head.ref}` "
              "was deleted.")
        return None
    return run_round(worker, rev, session, repo, pr)


def run_round(worker: WorkerLike, rev: Revision, session: Session, repo: Repository,
              pr: PullRequest) -> dict[str, Any] | None:
    try:
        base = worker.fetch_base(repo, session, pr.base.ref)
        head = worker.fetch_base(repo, session, pr.head.ref, pr.head.repo.clone_url if pr.head.repo else None)
        diff = git.Repo(worker.repo_cache.bare_path(repo.full_name)).git.diff(f"{base}...{head}")
    except (CloneError, git.GitCommandError) as exc:
        reply(worker, pr, rev, session, f"fixgraph could not revise this pull request: {exc}.")
        return None
    match = BRANCH_ISSUE.match(pr.head.ref)
    assert match is not None  # refusal() checked the branch's name
    issue = repo.get_issue(int(match.group(1)))
    first = worker.instance(repo, issue, head)
    inst = first.model_copy(update={"problem_statement": brief(first.problem_statement, pr, diff, rev)})
    publisher = RevisionPublisher(worker.cfg, repo, pr, issue.number, issue.title, session.token, askers(rev))
    repro = kept_repro(worker, inst.instance_id)
    initial: TaskState | None = {"repro": repro} if repro else None
    store = worker.store(inst)
    log.info("%s: revising at %s (%s)", rev.key, head[:12], askers(rev))
    try:
        record = worker.runner()(inst, worker.cfg, publisher=publisher, repo_cache=worker.repo_cache, store=store,
                                 initial=initial, **worker.run_kwargs)
    except Exception as exc:  # the pipeline's own bug: say so on the PR rather than go silent
        log.error("%s: pipeline crashed: %s", rev.key, worker._redact(f"{type(exc).__name__}: {exc}", session))
        reply(worker, pr, rev, session, f"fixgraph gave up on this revision: internal error ({type(exc).__name__}).",
              closes_round=True)
        return None
    record["revision"] = {"pr": pr.number, "branch": pr.head.ref, "head": head, "brief": inst.problem_statement,
                          "requests": [{"reason": r.reason, "sender": r.sender, "text": r.text, "path": r.path,
                                        "line": r.line} for r in rev.requests()]}
    store.write_record(record)
    reply(worker, pr, rev, session, outcome_text(rev, record), closes_round=True)
    return record
