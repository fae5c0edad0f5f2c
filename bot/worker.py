"""One job: issue -> Task -> the pipeline -> a PR, with a comment when it starts and ends.

The pipeline function is a parameter (default :func:`pipeline.tasks.run_task`), so the bot is
tested with the real graph driven by a scripted model, or with a stand-in.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections.abc import Callable
from typing import Any

import git
from github.GithubException import GithubException
from github.Issue import Issue
from github.Repository import Repository

from bot.events import Job, Revision, Trigger, is_command, is_own_comment
from bot.revise import revise
from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from fixgraph.github.client import GitHubAccess, Session
from fixgraph.github.pr import MARKER, CloneError, GitHubPublisher, RemoteGitError, run_git
from fixgraph.records import RunStore, file_lock, redact
from fixgraph.repo.workspace import RepoCache

log = logging.getLogger("fixgraph.bot")

RunFn = Callable[..., dict[str, Any]]
NO_BODY = "(The issue has no description; its title is all there is.)"


def default_run_fn() -> RunFn:
    import functools

    from graph import build_graph
    from pipeline.tasks import run_task

    return functools.partial(run_task, build_graph=build_graph)


def problem_statement(title: str, body: str | None, comments: list[tuple[str, str]]) -> str:
    """The issue's title, body and comments (the bot's own left out), as the pipeline reads it."""
    parts = [title.strip(), (body or "").strip() or NO_BODY]
    if comments:
        parts.append("Comments:\n\n" + "\n\n".join(f"@{who} wrote:\n{text.strip()}" for who, text in comments))
    return "\n\n".join(parts) + "\n"


class Worker:
    def __init__(self, cfg: RunConfig, access: GitHubAccess, repo_cache: RepoCache | None = None,
                 run_fn: RunFn | None = None, run_kwargs: dict[str, Any] | None = None):
        self.cfg = cfg
        self.access = access
        self.repo_cache = repo_cache or RepoCache(cfg.cache_dir)
        self.run_fn = run_fn
        self.run_kwargs = run_kwargs or {}

    # ---- helpers ---------------------------------------------------------------------

    def _redact(self, text: str, session: Session | None = None) -> str:
        extra = [session.token() or ""] if session is not None else []
        return redact(text, self.cfg.secrets() + extra)

    def _comment(self, issue: Issue, text: str, session: Session) -> None:
        try:
            issue.create_comment(self._redact(text, session) + "\n\n" + MARKER)
        except GithubException as exc:
            log.warning("could not comment on %s#%s: %s", issue.repository.full_name, issue.number, exc.status)

    def fetch_base(self, repo: Repository, session: Session, branch: str | None = None, url: str | None = None) -> str:
        """Clone (or update) the repository into the cache and return the head of ``branch`` (the
        default branch unless named; fetched from ``url``, a fork's, when given).

        The clone is authenticated like the push (a private repository works); RepoCache then finds
        it in place and never needs credentials itself.
        """
        name, branch, url = repo.full_name, branch or repo.default_branch, url or repo.clone_url
        bare = self.repo_cache.bare_path(name)
        secrets = self.cfg.secrets()
        with file_lock(bare.with_suffix(".lock")):
            try:
                if not (bare / "HEAD").is_file():
                    partial = bare.with_suffix(".partial")
                    shutil.rmtree(partial, ignore_errors=True)
                    run_git(git.Git(str(bare.parent)), url, session.token(), "clone", "--bare", "--quiet",
                            url, str(partial), secrets=secrets)
                    partial.rename(bare)
                else:
                    run_git(git.Repo(bare).git, url, session.token(), "fetch", "--quiet", url,
                            f"+refs/heads/{branch}:refs/heads/{branch}", secrets=secrets)
                return git.Repo(bare).git.rev_parse("--verify", f"refs/heads/{branch}^{{commit}}")
            except RemoteGitError as exc:
                raise CloneError(f"could not clone {name}: {exc}") from None
            except git.GitCommandError:
                raise CloneError(f"{name} has no branch {branch!r} to start from") from None

    def instance(self, repo: Repository, issue: Issue, base: str) -> Task:
        gh = self.cfg.github
        # The bot's own comments and bare commands say nothing about the bug.
        comments = [(c.user.login, c.body or "") for c in issue.get_comments()
                    if (c.body or "").strip() and not is_own_comment(c.body, c.user.login, gh)
                    and not is_command(c.body, gh.command)]
        owner, name = repo.full_name.split("/", 1)
        return Task(instance_id=f"{owner}__{name}-{issue.number}", repo=repo.full_name, base_commit=base,
                    problem_statement=problem_statement(issue.title, issue.body, comments))

    def store(self, instance: Task) -> RunStore:
        # A run id per job: the runner skips tasks a store already has, and every trigger must rerun.
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        return RunStore(f"bot-{instance.instance_id}-{stamp}", self.cfg.predictions_dir / "bot",
                        self.cfg.runs_dir, "fixgraph-bot", self.cfg.secrets())

    # ---- the job ---------------------------------------------------------------------

    def runner(self) -> RunFn:
        return self.run_fn or default_run_fn()

    def __call__(self, job: Job) -> None:
        if isinstance(job, Revision):
            revise(self, job)
        else:
            self.handle(job)

    def handle(self, trigger: Trigger) -> dict[str, Any] | None:
        try:
            session = self.access.session(trigger.installation_id, trigger.repo)
            repo = session.gh.get_repo(trigger.repo)
            issue = repo.get_issue(trigger.number)
        except GithubException as exc:
            # Nowhere to comment: the issue (or our access to it) is what failed.
            log.warning("%s: GitHub answered %s; job dropped", trigger.key, exc.status)
            return None
        return self._run(trigger, session, repo, issue)

    def _run(self, trigger: Trigger, session: Session, repo: Repository, issue: Issue) -> dict[str, Any] | None:
        if issue.pull_request is not None:
            log.info("%s is a pull request; ignored", trigger.key)
            return None
        label = f"`{self.cfg.github.label}` label" if trigger.reason == "label" else f"`{self.cfg.github.command}`"
        self._comment(issue, f"fixgraph is working on this issue (asked by @{trigger.sender} with the {label}). "
                             "It will comment again with a pull request or the reason it gave up.", session)
        try:
            base = self.fetch_base(repo, session)
        except CloneError as exc:
            log.warning("%s: %s", trigger.key, self._redact(str(exc), session))
            self._comment(issue, f"fixgraph gave up: {exc}.", session)
            return None
        inst = self.instance(repo, issue, base)
        publisher = GitHubPublisher(self.cfg, repo, issue.number, issue.title, session.token)
        run = self.runner()
        log.info("%s: running the pipeline at %s", trigger.key, base[:12])
        try:
            record = run(inst, self.cfg, publisher=publisher, repo_cache=self.repo_cache,
                         store=self.store(inst), **self.run_kwargs)
        except Exception as exc:  # the pipeline's own bug: say so on the issue rather than go silent
            log.error("%s: pipeline crashed: %s", trigger.key, self._redact(f"{type(exc).__name__}: {exc}", session))
            self._comment(issue, f"fixgraph gave up: internal error ({type(exc).__name__}).", session)
            return None
        self._comment(issue, self.summary(record), session)
        return record

    def summary(self, record: dict[str, Any]) -> str:
        published = record.get("published") or {}
        score = record.get("fix_score") or {}
        if published.get("pr_url"):
            verb = "updated" if published.get("updated") else "opened"
            draft = " as a draft" if published.get("draft") else ""
            kind = {"tests": "from tests", "semantic": "semantic, not from tests"}.get(score.get("kind", ""), "no score")
            value = score.get("fix_score")
            value_text = f"{float(value):.2f}" if value is not None else "n/a"
            return (f"fixgraph {verb} a pull request{draft}: {published['pr_url']}\n\n"
                    f"Critic verdict: {record.get('verdict') or 'NoVerdict'}; fix_score {value_text} ({kind}).")
        reason = published.get("reason") or record.get("failed") or record.get("stop_reason") or "no patch"
        return f"fixgraph gave up: {reason}."

