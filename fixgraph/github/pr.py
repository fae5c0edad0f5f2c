"""The PR agent's publisher with EVAL_MODE off: commit the patch, push a branch, open or update a PR.

Branch ``fixgraph/<number>-<slug>``; the push is forced, so a second run for the same issue
replaces the branch and edits the PR that is already open instead of opening another. Nothing
is opened unless the push went through, so a rejected push never leaves a PR behind.

The token reaches git through a credential helper that reads a 0600 file in a 0700 temporary
directory, removed when the push ends: never the command line, never the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import git
from github.GithubException import GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from fixgraph.config import RunConfig
from fixgraph.github.client import GitHubAccess, TokenSource, repo_allowed
from fixgraph.prompts import PROMPTS_DIR
from fixgraph.publish import Outcome
from fixgraph.records import redact
from fixgraph.repo.datafiles import data_file_problem
from fixgraph.repo.workspace import PatchError, Worktree

log = logging.getLogger("fixgraph.github.pr")

MAX_FINDINGS = 10
MAX_TESTS = 15
# Open PRs looked through for this issue's branch when the exact lookup finds none.
MAX_PRS_SCANNED = 300
# Hidden in every comment and PR body the bot writes, so it never reacts to its own text.
MARKER = "<!-- fixgraph -->"

class RemoteGitError(Exception):
    """A clone, fetch or push failed; the message is one line, already redacted."""


PushRejected = RemoteGitError


class CloneError(Exception):
    """The bot could not clone or fetch what a job starts from; the message says what."""


def branch_name(number: int, title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].rstrip("-")
    return f"fixgraph/{number}-{slug or 'issue'}"


def _is_http(url: str) -> bool:
    return url.startswith(("https://", "http://"))


@contextlib.contextmanager
def git_auth(url: str, token: str | None) -> Iterator[list[str]]:
    """``git -c`` options that let git authenticate to ``url`` with ``token``.

    The helper script holds only the path of the secret file, so the token is in no argv and no
    environment of any process; the directory is 0700 (mkdtemp) and removed on exit.
    """
    if not token or not _is_http(url):
        yield []
        return
    tmp = Path(tempfile.mkdtemp(prefix="fixgraph-cred-"))
    try:
        secret = tmp / "credential"
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"username=x-access-token\npassword={token}\n")
        helper = tmp / "helper"
        helper.write_text(f'#!/bin/sh\n[ "$1" = get ] && exec cat {shlex.quote(str(secret))}\nexit 0\n')
        helper.chmod(0o700)
        # The empty value first drops any helper configured globally (a keychain, a store file).
        yield ["-c", "credential.helper=", "-c", f"credential.helper=!{shlex.quote(str(helper))}",
               "-c", "credential.interactive=false"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def git_env() -> dict[str, str]:
    """Extra environment for git: never prompt. Callers' os.environ holds no secret (bot scrubs it)."""
    return {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "SSH_ASKPASS": "true"}


# What a network hiccup looks like in git's own words: worth another try, unlike a rejection.
_TRANSIENT_GIT = re.compile(r"Connection reset by peer|Recv failure|Empty reply from server|RPC failed|"
                            r"early EOF|Could not resolve host|Failed to connect|timed out|"
                            r"The requested URL returned error: (429|5\d\d)", re.I)
GIT_RETRIES = 2


def run_git(cmd: git.Git, url: str, token: str | None, *args: str, secrets: list[str]) -> str:
    """Run ``git <args>`` (in ``cmd``'s directory) against ``url`` with credentials; errors redacted.
    A transient network failure is retried (twice, after 1 s and 2 s); anything else is final."""
    for attempt in range(GIT_RETRIES + 1):
        with git_auth(url, token) as auth:
            try:
                return cmd.execute(["git", *auth, *args], env=git_env())  # type: ignore[call-overload]
            except git.GitCommandError as exc:
                reason = _git_reason(exc)
                if attempt < GIT_RETRIES and _TRANSIENT_GIT.search(str(exc.stderr or "")):
                    log.warning("git %s: transient failure, retrying: %s", args[0] if args else "",
                                redact(reason, secrets + [token or ""]))
                    time.sleep(1.0 + attempt)
                    continue
                raise RemoteGitError(redact(reason, secrets + [token or ""])) from None
    raise AssertionError("unreachable")


def _git_reason(exc: git.GitCommandError) -> str:
    """The remote's own words when it gave any (GitHub's ``remote:`` lines), else git's last line."""
    err = str(exc.stderr or "").removeprefix("\n  stderr: ").strip().strip("'")
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    remote = [ln.removeprefix("remote:").strip() for ln in lines if ln.startswith("remote:")]
    remote = [ln for ln in remote if ln]
    rejected = [ln.split("\t")[-1] for ln in str(exc.stdout or "").splitlines() if ln.startswith("!")]
    reason = "; ".join(remote[:3] + rejected[:1])
    return reason or (lines[-1] if lines else f"git exited with {exc.status}")


@dataclass
class FileChange:
    path: str
    added: int
    removed: int
    status: str


def files_changed(patch: str) -> list[FileChange]:
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        files = PatchSet(patch)
    except UnidiffParseError:
        return []
    out = []
    for pf in files:
        status = "added" if pf.is_added_file else "removed" if pf.is_removed_file else "modified"
        out.append(FileChange(pf.path, pf.added, pf.removed, status))
    return out


@cache
def _templates() -> Environment:
    return Environment(loader=FileSystemLoader(PROMPTS_DIR), undefined=StrictUndefined,
                       trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def draft_reasons(outcome: Outcome, threshold: float) -> list[str]:
    reasons = []
    fix_score = float(outcome.score.get("fix_score") or 0.0)
    if fix_score < threshold:
        reasons.append(f"fix_score {fix_score:.2f} is under the threshold {threshold:.2f}")
    if outcome.score.get("kind") in ("semantic", "none"):
        # No test ran on the patch: a judgment, however high, is not a tested fix.
        reasons.append(f"no test ran on the patch ({outcome.score.get('note') or 'tests not run'})")
    if outcome.guard_warnings:
        n = len(outcome.guard_warnings)
        reasons.append(f"the guard raised {n} warning{'' if n == 1 else 's'}")
    return reasons


def _chosen_findings(outcome: Outcome) -> list[dict[str, Any]]:
    chosen = [a for a in outcome.attempts if a.get("patch") == outcome.patch]
    attempt = chosen[-1] if chosen else (outcome.attempts[-1] if outcome.attempts else None)
    return [dict(f) for f in (attempt or {}).get("findings", [])]


def render_body(outcome: Outcome, cfg: RunConfig, issue_number: int) -> str:
    score = outcome.score
    findings = _chosen_findings(outcome)
    shown = []
    for f in findings[:MAX_FINDINGS]:
        where = f.get("file", "") + (f":{f['line']}" if f.get("line") else "")
        shown.append({"severity": f.get("severity", "error"), "source": f.get("source", "?"),
                      "rule": f.get("rule", ""), "where": where, "message": _one_line(f.get("message", ""))})
    tests = [{"name": name, "status": status}
             for group in (score.get("fail_to_pass") or {}, score.get("pass_to_pass") or {})
             for name, status in group.items()]
    plan = outcome.plan or {}
    plan_files = ", ".join(f"`{p}`" for p in (plan.get("files") or [])[:4])
    plan_line = _one_line(plan.get("reasoning") or "") or "(the planner gave no reasoning)"
    if plan_files:
        plan_line = f"{plan_line} Read first: {plan_files}."
    usage = outcome.usage or {}
    warnings = [_one_line(w.get("message") or w.get("rule") or str(w)) for w in outcome.guard_warnings]
    parts = {k: _fmt(score.get(k)) for k in ("test_pass_rate", "no_regression", "code_quality", "llm_score")}
    body = _templates().get_template("pr_body.md.j2").render(
        issue_number=issue_number,
        draft_reasons=draft_reasons(outcome, cfg.critic.fix_score_threshold),
        plan_line=plan_line,
        change_line=_one_line(outcome.explanation) or "(no explanation given)",
        files=files_changed(outcome.patch),
        verdict=outcome.verdict or "NoVerdict",
        attempts=max(len(outcome.attempts), 1),
        findings=shown,
        findings_more=max(len(findings) - MAX_FINDINGS, 0),
        fix_score=_fmt(float(score.get("fix_score") or 0.0)),
        threshold=_fmt(cfg.critic.fix_score_threshold),
        score_kind=score.get("kind", "none"),
        parts=parts,
        score_note=_one_line(score.get("note", "")),
        tests=tests[:MAX_TESTS],
        tests_more=max(len(tests) - MAX_TESTS, 0),
        tests_run=score.get("tests_run", len(tests)),
        test_backend=cfg.tests.backend,
        test_env=_one_line(str((score.get("test_run") or {}).get("env", "")), 400),
        tokens_in=usage.get("input_tokens", 0),
        tokens_out=usage.get("output_tokens", 0),
        calls=usage.get("calls", 0),
        dollars=f"{float(usage.get('dollars', 0.0)):.4f}",
        guard_warnings=warnings,
        repro_test=outcome.repro_test,
        stop_reason=_one_line(outcome.stop_reason, 120),
        command=cfg.github.command,
    )
    return redact(body.rstrip() + "\n\n" + MARKER + "\n", cfg.secrets())


def issue_number_of(instance_id: str) -> int | None:
    """``owner__name-123`` -> 123 (the bot's and SWE-bench's instance id scheme)."""
    tail = instance_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


class GitHubPublisher:
    """The PR agent's GitHub publisher.

    The bot builds one per job with the issue in hand. Built with the config alone (``graph.py``
    with EVAL_MODE=false), it works out the repository and issue from each task's instance.
    """

    def __init__(self, cfg: RunConfig, repo: Repository | None = None, issue_number: int | None = None,
                 issue_title: str | None = None, token: TokenSource | None = None, push_url: str | None = None):
        self.cfg = cfg
        self._fixed = repo is not None
        self.token: TokenSource = token or (lambda: None)
        self.push_url_given = push_url
        if repo is not None:
            self._bind(repo, issue_number or 0, issue_title or "", self.token)

    def _bind(self, repo: Repository, number: int, title: str, token: TokenSource) -> None:
        self.repo = repo
        self.number = number
        self.title = title
        self.token = token
        self.push_url = self.push_url_given or self.cfg.github.push_remote or repo.clone_url
        self.branch = branch_name(number, title)
        self.head_owner = self.cfg.github.fork_owner or repo.owner.login

    def _for_task(self, outcome: Outcome) -> GitHubPublisher | str:
        """Standalone use: a publisher bound to the task's repository and issue (or why not).

        A new object per task, so one publisher shared by parallel tasks holds no per-task state.
        """
        # The same guard as the bot's: a batch of SWE-bench tasks must not open PRs upstream by accident.
        if not repo_allowed(outcome.task.repo, self.cfg.github.allowlist):
            return f"{outcome.task.repo} is not in FIXGRAPH_ALLOWLIST; no pull request opened"
        number = issue_number_of(outcome.task.instance_id)
        if number is None:
            return f"instance id {outcome.task.instance_id!r} does not end with an issue number"
        try:
            session = GitHubAccess(self.cfg).session(repo=outcome.task.repo)
            repo = session.gh.get_repo(outcome.task.repo)
            title = repo.get_issue(number).title
        except GithubException as exc:
            return f"GitHub refused access to {outcome.task.repo}#{number} ({exc.status})"
        return GitHubPublisher(self.cfg, repo, number, title, session.token, self.push_url_given)

    def _secrets(self) -> list[str]:
        return self.cfg.secrets() + [self.token() or ""]

    def _fail(self, error: str, **extra: Any) -> dict[str, Any]:
        log.warning("issue #%s: %s", self.number, redact(error, self._secrets()))
        # kind "none": the runner counts the task as not patched, and "reason" is what the bot says.
        error = redact(error, self._secrets())
        return {"kind": "none", "publisher": "github_pr", "ok": False, "branch": self.branch,
                "reason": error, "error": error, **extra}

    def commit(self, wt: Worktree, outcome: Outcome) -> str:
        """A commit of the patch on the base commit, detached: no local branch to clash with later."""
        wt.reset()
        wt.apply(outcome.patch)
        if outcome.repro_test:
            # The reproduction test goes in as a regression test, with the data files it reads;
            # resolve() keeps each inside the repo.
            test_path = str(outcome.repro_test["path"])
            for item in [outcome.repro_test, *(outcome.repro_test.get("files") or [])]:
                if item is not outcome.repro_test and data_file_problem(test_path, str(item["path"])):
                    continue  # the Reproducer refuses these; a record edited since is not trusted either
                target = wt.resolve(item["path"])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(item["content"], encoding="utf-8")
        wt.repo.git.add("-A")
        message = (f"Fix #{self.number}: {_one_line(self.title, 60)}\n\n"
                   f"{_one_line(outcome.explanation, 600)}\n\n"
                   f"Proposed by fixgraph. Critic verdict: {outcome.verdict or 'NoVerdict'}; "
                   f"fix_score {float(outcome.score.get('fix_score') or 0.0):.2f} "
                   f"({outcome.score.get('kind', 'none')}).\n\nRefs #{self.number}\n")
        gh = self.cfg.github
        # -c user.* so the commit never depends on the machine's git identity; --no-verify because
        # hooks are the repository's code, not ours to run here.
        wt.repo.git.execute(["git", "-c", f"user.name={gh.commit_name}", "-c", f"user.email={gh.commit_email}",
                             "commit", "-q", "--no-verify", "-m", redact(message, self._secrets())],
                            env=git_env())
        return wt.repo.head.commit.hexsha

    def push(self, wt: Worktree, sha: str) -> None:
        run_git(wt.repo.git, self.push_url, self.token(), "push", "--force", "--porcelain", self.push_url,
                f"{sha}:refs/heads/{self.branch}", secrets=self.cfg.secrets())

    def delete_branch(self, wt: Worktree) -> None:
        with contextlib.suppress(RemoteGitError):
            run_git(wt.repo.git, self.push_url, self.token(), "push", self.push_url, f":refs/heads/{self.branch}",
                    secrets=self.cfg.secrets())

    def open_pr(self) -> PullRequest | None:
        """The open PR for this issue, if any; its branch is then the one to update.

        Looked up by exact head first; then by the ``fixgraph/<number>-`` prefix, so an issue whose
        title was edited since (a new slug) still updates its PR instead of opening another.
        """
        for pr in self.repo.get_pulls(state="open", head=f"{self.head_owner}:{self.branch}"):
            return pr
        prefix = f"fixgraph/{self.number}-"
        for seen, pr in enumerate(self.repo.get_pulls(state="open", sort="created", direction="desc")):
            if seen >= MAX_PRS_SCANNED:
                break
            if pr.head.ref.startswith(prefix) and pr.head.label.split(":")[0] == self.head_owner:
                self.branch = pr.head.ref
                return pr
        return None

    def _set_draft(self, pr: PullRequest, draft: bool) -> None:
        """REST cannot change a PR's draft state; GraphQL can. A refusal leaves the state as it was."""
        if bool(pr.draft) == draft:
            return
        try:
            if draft:
                pr.convert_to_draft()
            else:
                pr.mark_ready_for_review()
        except GithubException as exc:
            log.warning("issue #%s: PR #%s draft state left as it was (GitHub answered %s)",
                        self.number, pr.number, exc.status)

    def publish(self, outcome: Outcome) -> dict[str, Any]:
        if not self._fixed:
            bound = self._for_task(outcome)
            if isinstance(bound, str):
                return {"kind": "none", "publisher": "github_pr", "ok": False, "reason": bound, "error": bound}
            return bound.publish(outcome)
        if not outcome.patch.strip():
            return self._fail(f"no patch to propose ({outcome.stop_reason or 'the pipeline produced none'})")
        if outcome.guard_warnings and self.cfg.critic.guard == "block":
            # The PR agent never hands such a patch over; this is the last line before a push.
            return self._fail("the unsafe-patch guard blocks this patch: not pushed")
        wt = outcome.worktree
        if wt is None:
            return self._fail("no worktree to commit the patch from")
        try:
            sha = self.commit(wt, outcome)
        except (PatchError, git.GitCommandError) as exc:
            return self._fail(f"could not commit the patch: {_one_line(str(exc), 200)}")
        try:
            existing = self.open_pr()
        except GithubException as exc:
            return self._fail(f"GitHub refused to list pull requests ({exc.status})")
        try:
            self.push(wt, sha)
        except RemoteGitError as exc:
            return self._fail(f"push of {self.branch} was rejected: {exc}", commit=sha)
        body = render_body(outcome, self.cfg, self.number)
        reasons = draft_reasons(outcome, self.cfg.critic.fix_score_threshold)
        title = f"Fix #{self.number}: {_one_line(self.title, 80)}"
        try:
            if existing is not None:
                # The force-push already moved the PR's head; the text and draft state follow.
                existing.edit(title=title, body=body)
                self._set_draft(existing, bool(reasons))
                pr, updated = existing, True
            else:
                pr = self.repo.create_pull(base=self.repo.default_branch, head=f"{self.head_owner}:{self.branch}",
                                           title=title, body=body, draft=bool(reasons),
                                           maintainer_can_modify=True)
                updated = False
        except GithubException as exc:
            if existing is None:
                self.delete_branch(wt)  # a pushed branch without its PR is half-done work
            message = exc.data.get("message") if isinstance(exc.data, dict) else None
            return self._fail(f"GitHub refused the pull request ({exc.status}: {message or 'no message'})",
                              commit=sha)
        log.info("issue #%s: %s PR #%s (%s)", self.number, "updated" if updated else "opened", pr.number,
                 pr.html_url)
        return {"kind": "github_pr", "ok": True, "pr_url": pr.html_url, "pr_number": pr.number,
                "branch": self.branch, "commit": sha, "draft": bool(pr.draft), "draft_reasons": reasons,
                "updated": updated}
