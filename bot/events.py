"""What starts a job: a webhook delivery (or a polled event) turned into a :class:`Trigger`.

Pure functions over payloads, so the rules (signature, allowlist, who may trigger, the bot's own
comments) are tested without a server.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from fixgraph.config import GitHubSettings
from fixgraph.github.client import repo_allowed
from fixgraph.github.pr import MARKER

# GitHub's author_association values for people with write access or membership.
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


@dataclass(frozen=True)
class Trigger:
    repo: str
    number: int
    reason: str  # label | comment
    sender: str
    installation_id: int | None = None

    @property
    def key(self) -> str:
        return f"{self.repo.lower()}#{self.number}"


@dataclass(frozen=True)
class Ignored:
    reason: str


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """``X-Hub-Signature-256`` is ``sha256=<hex HMAC of the raw body>``; compared in constant time."""
    if not secret or not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def is_own_comment(body: str | None, login: str | None, gh: GitHubSettings) -> bool:
    if body and MARKER in body:
        return True
    return bool(gh.bot_login and login and login.lower() == gh.bot_login.lower())


def is_command(body: str | None, command: str) -> bool:
    words = (body or "").strip().split()
    return bool(words) and words[0] == command


def may_command(login: str, association: str | None, gh: GitHubSettings) -> bool:
    if (association or "").upper() in TRUSTED_ASSOCIATIONS:
        return True
    return login.lower() in {u.lower() for u in gh.allowed_users}


def comment_trigger(repo: str, number: int, body: str | None, login: str, association: str | None,
                    gh: GitHubSettings, installation_id: int | None = None) -> Trigger | Ignored:
    if is_own_comment(body, login, gh):
        return Ignored("the bot's own comment")
    if not is_command(body, gh.command):
        return Ignored("comment is not a command")
    if not may_command(login, association, gh):
        return Ignored(f"{login} may not trigger fixgraph ({association or 'no association'})")
    if not repo_allowed(repo, gh.allowlist):
        return Ignored(f"{repo} is not in the allowlist")
    return Trigger(repo, number, "comment", login, installation_id)


def label_trigger(repo: str, number: int, label: str, login: str, gh: GitHubSettings,
                  installation_id: int | None = None) -> Trigger | Ignored:
    if label.lower() != gh.label.lower():
        return Ignored(f"label {label!r} is not {gh.label!r}")
    if not repo_allowed(repo, gh.allowlist):
        return Ignored(f"{repo} is not in the allowlist")
    return Trigger(repo, number, "label", login, installation_id)


def _get(payload: dict[str, Any], *path: str) -> Any:
    node: Any = payload
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def from_webhook(event: str, payload: Any, gh: GitHubSettings) -> Trigger | Revision | Ignored:
    """The trigger a delivery carries, or why it carries none."""
    if not isinstance(payload, dict):
        return Ignored("payload is not a JSON object")
    if event in ("pull_request_review", "pull_request_review_comment"):
        return _review_event(event, payload, gh)
    action = payload.get("action")
    repo = _get(payload, "repository", "full_name")
    number = _get(payload, "issue", "number")
    sender = _get(payload, "sender", "login") or ""
    installation = _installation(payload)
    if event not in ("issues", "issue_comment"):
        return Ignored(f"event {event!r} is not handled")
    if not isinstance(repo, str) or not isinstance(number, int):
        return Ignored("payload has no repository or issue number")
    on_pr = _get(payload, "issue", "pull_request") is not None
    if on_pr and event == "issues":
        return Ignored("the issue is a pull request")
    if event == "issues":
        if action != "labeled":
            return Ignored(f"issues action {action!r} is not handled")
        return label_trigger(repo, number, str(_get(payload, "label", "name") or ""), sender, gh, installation)
    if action != "created":
        # An edit is never a trigger: the words acted on are the ones written when it was created.
        return Ignored(f"issue_comment action {action!r} is not handled")
    body = _get(payload, "comment", "body")
    body = body if isinstance(body, str) else None
    association = _get(payload, "comment", "author_association")
    association = association if isinstance(association, str) else None
    login = str(_get(payload, "comment", "user", "login") or sender)
    if on_pr:
        # The issue object of a PR has no head branch; the worker checks it on the PR itself.
        pr = {k: v for k, v in payload["issue"].items() if k != "head"}
        return revision_trigger(repo, pr, "comment", body, login, association, gh,
                                installation_id=installation, comment_id=_int(_get(payload, "comment", "id")))
    return comment_trigger(repo, number, body, login, association, gh, installation)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _installation(payload: dict[str, Any]) -> int | None:
    return _int(_get(payload, "installation", "id"))


def _review_event(event: str, payload: dict[str, Any], gh: GitHubSettings) -> Revision | Ignored:
    """A review submitted on a PR, or a comment on one of its lines."""
    repo, pr = _get(payload, "repository", "full_name"), payload.get("pull_request")
    if not isinstance(repo, str) or not isinstance(pr, dict):
        return Ignored("payload has no repository or pull request")
    key = "review" if event == "pull_request_review" else "comment"
    wanted = "submitted" if key == "review" else "created"
    if payload.get("action") != wanted:
        return Ignored(f"{event} action {payload.get('action')!r} is not handled")
    item = payload.get(key)
    if not isinstance(item, dict):
        return Ignored(f"payload has no {key}")
    if key == "review" and str(item.get("state") or "").lower() == "approved":
        return Ignored("the review approves: nothing to revise")
    text, association = item.get("body"), item.get("author_association")
    login = str(_get(item, "user", "login") or _get(payload, "sender", "login") or "")
    path, line = item.get("path"), _int(item.get("line")) or _int(item.get("original_line"))
    return revision_trigger(repo, pr, "review" if key == "review" else "review_comment",
                            text if isinstance(text, str) else None, login,
                            association if isinstance(association, str) else None, gh,
                            path=path if isinstance(path, str) else None, line=line,
                            installation_id=_installation(payload),
                            comment_id=_int(item.get("id")) if key == "comment" else None)


# A reviewer's words go into a prompt; past this size they are cut (and say so) rather than let one
# comment crowd out the issue and the diff.
MAX_REVIEW_CHARS = 8000


@dataclass(frozen=True)
class Revision:
    """A request to revise the bot's own PR: the reviewer's words, and the lines a line comment is on."""

    repo: str
    number: int
    reason: str  # review | review_comment | comment
    sender: str
    text: str
    path: str | None = None
    line: int | None = None
    installation_id: int | None = None
    # The line comment to answer in its thread (a review or a PR comment is answered on the PR).
    comment_id: int | None = None
    # Requests that arrived while an earlier round ran: answered together in this one round.
    more: tuple[Revision, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.repo.lower()}#{self.number}"

    def requests(self) -> tuple[Revision, ...]:
        return (self, *self.more)


def cut_review(text: str, limit: int = MAX_REVIEW_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: the comment was {len(text)} characters; the first {limit} are kept]"


def is_bot_pr(pr: Any, gh: GitHubSettings) -> bool:
    """The bot opened this PR: its body carries the marker, its branch is one the bot names, and its
    author is the bot when the bot's login is known."""
    if not isinstance(pr, dict):
        return False
    body, ref, login = pr.get("body"), _get(pr, "head", "ref"), _get(pr, "user", "login")
    if not (isinstance(body, str) and MARKER in body):
        return False
    # An issue_comment's PR has no head at all: the worker checks the branch on the PR itself.
    if "head" in pr and not (isinstance(ref, str) and ref.startswith("fixgraph/")):
        return False
    return not gh.bot_login or (isinstance(login, str) and login.lower() == gh.bot_login.lower())


def revision_trigger(repo: str, pr: Any, reason: str, text: str | None, login: str,
                     association: str | None, gh: GitHubSettings,
                     path: str | None = None, line: int | None = None, installation_id: int | None = None,
                     comment_id: int | None = None) -> Revision | Ignored:
    """Whether a review, a line comment or a ``/fixgraph`` comment on a PR asks for a revision."""
    if is_own_comment(text, login, gh):
        return Ignored("the bot's own comment")
    if not is_bot_pr(pr, gh):
        return Ignored("the pull request was not opened by fixgraph")
    if pr.get("state") != "open" or pr.get("merged") or pr.get("merged_at"):
        return Ignored("the pull request is closed")
    words = (text or "").strip()
    if reason == "comment":
        if not is_command(words, gh.command):
            return Ignored("comment is not a command")
        words = words[len(gh.command):].strip()
    if not words:
        return Ignored("nothing to revise: the review carries no words")
    if not may_command(login, association, gh):
        return Ignored(f"{login} may not trigger fixgraph ({association or 'no association'})")
    if not repo_allowed(repo, gh.allowlist):
        return Ignored(f"{repo} is not in the allowlist")
    number = pr.get("number")
    if not isinstance(number, int):
        return Ignored("payload has no pull request number")
    return Revision(repo, number, reason, login, cut_review(words), path, line, installation_id, comment_id)


# What the job queue runs: a run on an issue, or a revision of the bot's PR.
Job = Trigger | Revision
