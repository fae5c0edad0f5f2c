"""A loopback fake of GitHub: the REST endpoints fixgraph's bot calls, and git over smart HTTP.

Served on 127.0.0.1 under an Enterprise-style ``/api/v3`` prefix (so ``base_url`` handling is
exercised too). Git repositories are real bare repos served through ``git http-backend`` and, like
GitHub, ask for basic auth with a token as the password. Answers have GitHub's shapes and status
codes; a rate-limit answer (403 with ``Retry-After`` or ``x-ratelimit-reset``) can be armed once
for any endpoint. Everything it receives is kept in ``requests`` for the tests to inspect.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jwt

API = "/api/v3"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    status: int = 0


@dataclass
class RateLimit:
    method: str
    pattern: str
    kind: str  # retry_after | reset
    seconds: int


@dataclass
class FakeGitHub:
    root: Path
    tokens: set[str] = field(default_factory=set)
    app_id: int | None = None
    app_public_key: str | None = None
    installations: dict[str, int] = field(default_factory=dict)  # repo -> installation id
    # token -> its X-OAuth-Scopes header on GET /user (classic tokens); absent: a fine-grained token.
    token_scopes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.ids = itertools.count(1000)
        self.repos: dict[str, dict[str, Any]] = {}
        self.issues: dict[str, dict[int, dict[str, Any]]] = {}
        self.comments: dict[str, list[dict[str, Any]]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.pulls: dict[str, list[dict[str, Any]]] = {}
        self.reviews: dict[str, list[dict[str, Any]]] = {}
        self.review_comments: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[Seen] = []
        self.git_requests: list[Seen] = []
        self.rate_limits: list[RateLimit] = []
        self.issued_tokens: list[str] = []
        # Set to a message to make POST /pulls answer 422 with it (e.g. a base branch that is gone).
        self.refuse_pulls: str | None = None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def base_url(self) -> str:
        return self.host + API

    def start(self) -> FakeGitHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- state set up by tests -------------------------------------------------------

    def add_repo(self, full_name: str, bare: Path | None, default_branch: str = "main") -> dict[str, Any]:
        """Register a repository; ``bare`` is its git data (None: the API knows it, git 404s)."""
        owner, name = full_name.split("/")
        if bare is not None:
            target = self.root / owner / f"{name}.git"
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(bare.resolve())
        repo = {
            "id": next(self.ids), "name": name, "full_name": full_name, "private": False,
            "owner": {"login": owner, "id": next(self.ids), "type": "User"},
            "default_branch": default_branch,
            "clone_url": f"{self.host}/{owner}/{name}.git",
            "html_url": f"{self.host}/{full_name}", "url": f"{self.base_url}/repos/{full_name}",
        }
        with self.lock:
            self.repos[full_name] = repo
            self.issues[full_name] = {}
            self.comments[full_name] = []
            self.events[full_name] = []
            self.pulls[full_name] = []
            self.reviews[full_name] = []
            self.review_comments[full_name] = []
        return repo

    def add_issue(self, full_name: str, number: int, title: str, body: str | None,
                  labels: tuple[str, ...] = (), user: str = "alice") -> dict[str, Any]:
        issue = {
            "id": next(self.ids), "number": number, "title": title, "body": body, "state": "open",
            "user": {"login": user, "id": 7, "type": "User"}, "labels": [], "comments": 0,
            "author_association": "OWNER", "created_at": now_iso(), "updated_at": now_iso(),
            "html_url": f"{self.host}/{full_name}/issues/{number}",
            "url": f"{self.base_url}/repos/{full_name}/issues/{number}",
            "repository_url": f"{self.base_url}/repos/{full_name}",
        }
        with self.lock:
            self.issues[full_name][number] = issue
        for label in labels:
            self.label(full_name, number, label)
        return issue

    def label(self, full_name: str, number: int, label: str, actor: str = "alice") -> dict[str, Any]:
        with self.lock:
            issue = self.issues[full_name][number]
            if label not in [lb["name"] for lb in issue["labels"]]:
                issue["labels"].append({"id": next(self.ids), "name": label, "color": "ededed"})
            event = {"id": next(self.ids), "event": "labeled", "label": {"name": label, "color": "ededed"},
                     "actor": {"login": actor, "id": 7, "type": "User"}, "created_at": now_iso(),
                     "issue": issue, "url": f"{self.base_url}/repos/{full_name}/issues/events/x"}
            self.events[full_name].append(event)
            return event

    def comment(self, full_name: str, number: int, body: str, user: str = "alice",
                association: str = "OWNER") -> dict[str, Any]:
        with self.lock:
            return self._add_comment(full_name, number, body, user, association)

    def _add_comment(self, full_name: str, number: int, body: str, user: str, association: str) -> dict[str, Any]:
        cid = next(self.ids)
        c = {"id": cid, "body": body, "user": {"login": user, "id": 8, "type": "User"},
             "author_association": association, "created_at": now_iso(), "updated_at": now_iso(),
             "html_url": f"{self.host}/{full_name}/issues/{number}#issuecomment-{cid}",
             "url": f"{self.base_url}/repos/{full_name}/issues/comments/{cid}",
             "issue_url": f"{self.base_url}/repos/{full_name}/issues/{number}", "_number": number}
        self.comments[full_name].append(c)
        self.issues[full_name][number]["comments"] += 1
        return c

    def comments_on(self, full_name: str, number: int) -> list[str]:
        with self.lock:
            return [c["body"] for c in self.comments[full_name] if c["_number"] == number]

    def open_pulls(self, full_name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.pulls[full_name] if p["state"] == "open"]

    def add_pull(self, full_name: str, branch: str, title: str, body: str, head_owner: str | None = None,
                 user: str = "fixgraph-bot[bot]") -> dict[str, Any]:
        """A PR from ``branch`` (which must exist in the repository's git data) onto the default branch."""
        with self.lock:
            repo = self.repos[full_name]
            status, _, pr = self._create_pull(repo, full_name, {
                "head": f"{head_owner or repo['owner']['login']}:{branch}", "base": repo["default_branch"],
                "title": title, "body": body})
            assert status == 201, pr
            pr["user"] = {"login": user, "id": 9, "type": "Bot" if user.endswith("[bot]") else "User"}
            self.issues[full_name][pr["number"]]["user"] = pr["user"]
            return pr

    def pull(self, full_name: str, number: int) -> dict[str, Any]:
        with self.lock:
            return next(p for p in self.pulls[full_name] if p["number"] == number)

    def review(self, full_name: str, number: int, body: str, user: str = "alice", association: str = "OWNER",
               state: str = "COMMENTED") -> dict[str, Any]:
        """A review submitted on PR ``number`` (state COMMENTED, CHANGES_REQUESTED or APPROVED)."""
        with self.lock:
            pr = next(p for p in self.pulls[full_name] if p["number"] == number)
            rid = next(self.ids)
            review = {"id": rid, "body": body, "state": state, "user": {"login": user, "id": 8, "type": "User"},
                      "author_association": association, "commit_id": pr["head"]["sha"], "submitted_at": now_iso(),
                      "html_url": f"{pr['html_url']}#pullrequestreview-{rid}", "pull_request_url": pr["url"],
                      "_number": number}
            self.reviews[full_name].append(review)
            return review

    def review_comment(self, full_name: str, number: int, body: str, path: str, line: int, user: str = "alice",
                       association: str = "OWNER", in_reply_to: int | None = None) -> dict[str, Any]:
        """A comment on line ``line`` of ``path`` in PR ``number``'s diff."""
        with self.lock:
            return self._add_review_comment(full_name, number, body, path, line, user, association, in_reply_to)

    def _add_review_comment(self, full_name: str, number: int, body: str, path: str | None, line: int | None,
                            user: str, association: str, in_reply_to: int | None) -> dict[str, Any]:
        pr = next(p for p in self.pulls[full_name] if p["number"] == number)
        cid = next(self.ids)
        c = {"id": cid, "body": body, "path": path, "line": line, "original_line": line, "side": "RIGHT",
             "user": {"login": user, "id": 8, "type": "User"}, "author_association": association,
             "commit_id": pr["head"]["sha"], "created_at": now_iso(), "updated_at": now_iso(),
             "html_url": f"{pr['html_url']}#discussion_r{cid}", "pull_request_url": pr["url"],
             "url": f"{self.base_url}/repos/{full_name}/pulls/comments/{cid}", "_number": number,
             **({"in_reply_to_id": in_reply_to} if in_reply_to is not None else {})}
        self.review_comments[full_name].append(c)
        return c

    def review_comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.review_comments[full_name] if c["_number"] == number]

    def rate_limit_once(self, method: str, pattern: str, kind: str = "retry_after", seconds: int = 1) -> None:
        with self.lock:
            self.rate_limits.append(RateLimit(method, pattern, kind, seconds))

    def all_text(self) -> str:
        """Every request body and header the fake received (for secret-leak checks)."""
        with self.lock:
            return "\n".join(json.dumps(s.body, default=str) for s in self.requests) + "\n".join(
                c["body"] for cs in self.comments.values() for c in cs) + "\n".join(
                str(p.get("body")) for ps in self.pulls.values() for p in ps)

    # ---- REST ------------------------------------------------------------------------

    def authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        scheme, _, cred = auth.partition(" ")
        return scheme.lower() in ("token", "bearer") and (cred in self.tokens or cred in self.issued_tokens)

    def rest(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str],
             body: Any) -> tuple[int, dict[str, str], Any]:
        m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
        if m and method == "POST":
            return self._access_token(int(m.group(1)), headers)
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/installation", path)
        if m and method == "GET" and self._app_claims(headers) is not None:
            iid = self.installations.get(m.group(1))
            if iid is None:
                return 404, {}, {"message": "Not Found"}
            return 200, {}, {"id": iid, "app_id": self.app_id, "account": {"login": m.group(1).split("/")[0]}}
        if not self.authorized(headers):
            return 401, {}, {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
        if path == "/user" and method == "GET":
            token = headers.get("authorization", "").partition(" ")[2]
            scopes = self.token_scopes.get(token)
            return 200, {} if scopes is None else {"X-OAuth-Scopes": scopes}, {
                "login": "fixgraph-bot", "id": 1, "type": "User"}
        if path == "/graphql" and method == "POST":
            with self.lock:
                return self._graphql(body)
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)(/.*)?", path)
        if not m:
            return 404, {}, {"message": "Not Found"}
        full_name, rest = m.group(1), m.group(2) or ""
        with self.lock:
            repo = self.repos.get(full_name)
            if repo is None:
                return 404, {}, {"message": "Not Found"}
            return self._repo_endpoint(repo, full_name, method, rest, query, body)

    def _repo_endpoint(self, repo: dict[str, Any], full_name: str, method: str, rest: str,
                       query: dict[str, list[str]], body: Any) -> tuple[int, dict[str, str], Any]:
        q = {k: v[0] for k, v in query.items()}
        if rest == "" and method == "GET":
            return 200, {}, repo
        m = re.fullmatch(r"/issues/(\d+)", rest)
        if m and method == "GET":
            issue = self.issues[full_name].get(int(m.group(1)))
            return (200, {}, issue) if issue else (404, {}, {"message": "Not Found"})
        m = re.fullmatch(r"/issues/(\d+)/comments", rest)
        if m:
            number = int(m.group(1))
            if number not in self.issues[full_name]:
                return 404, {}, {"message": "Not Found"}
            if method == "GET":
                return 200, {}, [c for c in self.comments[full_name] if c["_number"] == number]
            if method == "POST":
                if not isinstance(body, dict) or not body.get("body"):
                    return 422, {}, {"message": "Validation Failed"}
                return 201, {}, self._add_comment(full_name, number, body["body"], "fixgraph-bot[bot]", "NONE")
        if rest == "/issues" and method == "GET":
            wanted = {x for x in q.get("labels", "").split(",") if x}
            state = q.get("state", "open")
            return 200, {}, [i for i in self.issues[full_name].values()
                             if (state == "all" or i["state"] == state)
                             and wanted <= {lb["name"] for lb in i["labels"]}]
        if rest == "/issues/comments" and method == "GET":
            since = q.get("since", "")
            return 200, {}, [c for c in self.comments[full_name] if c["created_at"] >= since]
        if rest == "/issues/events" and method == "GET":
            return 200, {}, list(reversed(self.events[full_name]))  # newest first, as GitHub
        found = self._pull_endpoint(full_name, method, rest, q, body)
        if found is not None:
            return found
        if rest == "/pulls" and method == "GET":
            pulls = self.pulls[full_name]
            if q.get("state", "open") != "all":
                pulls = [p for p in pulls if p["state"] == q.get("state", "open")]
            if "head" in q:
                pulls = [p for p in pulls if p["head"]["label"] == q["head"]]
            return 200, {}, pulls
        if rest == "/pulls" and method == "POST":
            return self._create_pull(repo, full_name, body)
        m = re.fullmatch(r"/pulls/(\d+)", rest)
        if m:
            pr = next((p for p in self.pulls[full_name] if p["number"] == int(m.group(1))), None)
            if pr is None:
                return 404, {}, {"message": "Not Found"}
            pr["head"]["sha"] = self._branch_sha(full_name, pr["head"]["ref"]) or pr["head"]["sha"]
            if method == "PATCH":
                for key in ("title", "body", "state"):
                    if key in body:
                        pr[key] = body[key]
                        if key in ("body", "state") and pr["number"] in self.issues[full_name]:
                            self.issues[full_name][pr["number"]][key] = body[key]
                pr["updated_at"] = now_iso()
                pr["_edits"] = pr.get("_edits", 0) + 1
            return 200, {}, pr
        return 404, {}, {"message": "Not Found"}

    def _pull_endpoint(self, full_name: str, method: str, rest: str, q: dict[str, str],
                       body: Any) -> tuple[int, dict[str, str], Any] | None:
        """Branches, reviews and review comments (None: not one of these)."""
        m = re.fullmatch(r"/branches/(.+)", rest)
        if m and method == "GET":
            sha = self._branch_sha(full_name, m.group(1))
            if sha is None:
                return 404, {}, {"message": "Branch not found"}
            return 200, {}, {"name": m.group(1), "commit": {"sha": sha}, "protected": False}
        if rest == "/pulls/comments" and method == "GET":
            since = q.get("since", "")
            return 200, {}, [c for c in self.review_comments[full_name] if c["created_at"] >= since]
        m = re.fullmatch(r"/pulls/(\d+)/(reviews|comments)", rest)
        if m and method == "GET":
            store = self.reviews if m.group(2) == "reviews" else self.review_comments
            return 200, {}, [x for x in store[full_name] if x["_number"] == int(m.group(1))]
        m = re.fullmatch(r"/pulls/(\d+)/comments/(\d+)/replies", rest)
        if m and method == "POST":
            number, parent = int(m.group(1)), int(m.group(2))
            top = next((c for c in self.review_comments[full_name]
                        if c["id"] == parent and c["_number"] == number), None)
            if top is None:
                return 404, {}, {"message": "Not Found"}
            if not isinstance(body, dict) or not body.get("body"):
                return 422, {}, {"message": "Validation Failed"}
            return 201, {}, self._add_review_comment(full_name, number, body["body"], top["path"], top["line"],
                                                     "fixgraph-bot[bot]", "NONE", parent)
        return None

    def _create_pull(self, repo: dict[str, Any], full_name: str, body: Any) -> tuple[int, dict[str, str], Any]:
        if self.refuse_pulls:
            return 422, {}, {"message": self.refuse_pulls,
                             "errors": [{"resource": "PullRequest", "field": "base", "code": "invalid"}]}
        head = body.get("head", "")
        owner, _, branch = head.rpartition(":")
        owner = owner or repo["owner"]["login"]
        sha = self._branch_sha(full_name, branch)
        if sha is None:
            return 422, {}, {"message": "Validation Failed",
                             "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}]}
        label = f"{owner}:{branch}"
        if any(p["head"]["label"] == label and p["state"] == "open" for p in self.pulls[full_name]):
            return 422, {}, {"message": "Validation Failed",
                             "errors": [{"message": f"A pull request already exists for {label}."}]}
        number = max([*self.issues[full_name], *[p["number"] for p in self.pulls[full_name]], 0]) + 1
        pr_id = next(self.ids)
        pr = {
            "id": pr_id, "node_id": f"PR_kw{pr_id}", "number": number, "state": "open", "title": body.get("title"),
            "body": body.get("body"), "draft": bool(body.get("draft")), "merged": False, "merged_at": None,
            "user": {"login": "fixgraph-bot[bot]", "id": 9, "type": "Bot"},
            "head": {"ref": branch, "label": label, "sha": sha, "repo": repo},
            "base": {"ref": body.get("base"), "label": f"{repo['owner']['login']}:{body.get('base')}", "repo": repo},
            "html_url": f"{self.host}/{full_name}/pull/{number}",
            "url": f"{self.base_url}/repos/{full_name}/pulls/{number}",
            "issue_url": f"{self.base_url}/repos/{full_name}/issues/{number}",
            "created_at": now_iso(), "updated_at": now_iso(),
        }
        self.pulls[full_name].append(pr)
        # On GitHub a PR is also an issue: its conversation comments live under /issues/{number}.
        self.issues[full_name][number] = {
            "id": pr_id, "number": number, "title": pr["title"], "body": pr["body"], "state": "open",
            "user": pr["user"], "labels": [], "comments": 0, "author_association": "NONE",
            "created_at": pr["created_at"], "updated_at": pr["created_at"], "html_url": pr["html_url"],
            "url": f"{self.base_url}/repos/{full_name}/issues/{number}",
            "repository_url": f"{self.base_url}/repos/{full_name}", "pull_request": {"url": pr["url"]}}
        return 201, {}, pr

    def _graphql(self, body: Any) -> tuple[int, dict[str, str], Any]:
        """The two draft mutations (REST cannot change a PR's draft state)."""
        query = str((body or {}).get("query", ""))
        m = re.search(r"\b(markPullRequestReadyForReview|convertPullRequestToDraft)\(", query)
        if not m:
            return 200, {}, {"errors": [{"message": "unsupported by the fake"}]}
        node = ((body.get("variables") or {}).get("input") or {}).get("pullRequestId")
        pr = next((p for ps in self.pulls.values() for p in ps if p["node_id"] == node), None)
        if pr is None:
            return 200, {}, {"errors": [{"type": "NOT_FOUND", "message": f"Could not resolve to a node with the global id of '{node}'"}]}
        pr["draft"] = m.group(1) == "convertPullRequestToDraft"
        return 200, {}, {"data": {m.group(1): {"clientMutationId": None, "pullRequest": {"isDraft": pr["draft"]}}}}

    def _branch_sha(self, full_name: str, branch: str) -> str | None:
        owner, name = full_name.split("/")
        git_dir = self.root / owner / f"{name}.git"
        if not git_dir.exists():
            return None
        proc = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "-q",
                               f"refs/heads/{branch}"], capture_output=True, text=True)
        return proc.stdout.strip() or None

    def _app_claims(self, headers: dict[str, str]) -> dict[str, Any] | None:
        """The App JWT's claims when it is signed by the App's key and names the App, else None."""
        scheme, _, cred = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or self.app_public_key is None:
            return None
        try:
            claims = jwt.decode(cred, self.app_public_key, algorithms=["RS256"])
        except jwt.PyJWTError:
            return None
        return claims if str(claims.get("iss")) == str(self.app_id) else None

    def _access_token(self, installation_id: int, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
        if self._app_claims(headers) is None:
            return 401, {}, {"message": "A JSON web token could not be decoded"}
        if installation_id not in self.installations.values():
            return 404, {}, {"message": "Not Found"}
        token = f"ghs_installation{next(self.ids)}x{installation_id}"
        self.issued_tokens.append(token)
        expires = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return 201, {}, {"token": token, "expires_at": expires, "permissions": {}, "repository_selection": "all"}

    def rate_limited(self, method: str, path: str) -> RateLimit | None:
        with self.lock:
            for rl in self.rate_limits:
                if rl.method == method and re.search(rl.pattern, path):
                    self.rate_limits.remove(rl)
                    return rl
        return None

    # ---- git smart HTTP --------------------------------------------------------------

    def git_authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, cred = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            _user, _, password = base64.b64decode(cred).decode().partition(":")
        except ValueError:
            return False
        return password in self.tokens or password in self.issued_tokens

    def git_cgi(self, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes) -> tuple[int, dict[str, str], bytes]:
        env = {"GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
               "QUERY_STRING": query, "REQUEST_METHOD": method, "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": headers.get("content-type", ""),
               "CONTENT_LENGTH": str(len(body)), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if headers.get("content-encoding"):
            env["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
        if headers.get("git-protocol"):
            env["GIT_PROTOCOL"] = headers["git-protocol"]
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        status, out_headers = 200, {}
        for line in head.decode(errors="replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                out_headers[key.strip()] = value.strip()
        return status, out_headers, payload


def _public(value: Any) -> Any:
    """What GitHub would send: the fake's bookkeeping keys (leading underscore) left out."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items() if not k.startswith("_")}
    if isinstance(value, list):
        return [_public(v) for v in value]
    return value


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            raw = self._body()
            if path == "/api/graphql":  # where GitHub Enterprise serves GraphQL beside /api/v3
                path = "/graphql"
            elif not path.startswith(API + "/"):
                self._git(path, parts.query, headers, raw)
                return
            else:
                path = path[len(API):]
            body: Any = None
            if raw:
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"Content-Type": "application/json"}, b'{"message": "Problems parsing JSON"}')
                    return
            seen = Seen(self.command, path, parse_qs(parts.query), headers, body)
            with fake.lock:
                fake.requests.append(seen)
            rl = fake.rate_limited(self.command, path)
            if rl is not None:
                seen.status = 403
                reset = int(time.time()) + rl.seconds
                hdrs = {"Content-Type": "application/json", "x-ratelimit-limit": "5000",
                        "x-ratelimit-remaining": "0", "x-ratelimit-used": "5000",
                        "x-ratelimit-reset": str(reset), "x-ratelimit-resource": "core"}
                if rl.kind == "retry_after":
                    hdrs["Retry-After"] = str(rl.seconds)
                    msg = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
                else:
                    msg = "API rate limit exceeded for installation ID 1."
                payload = json.dumps({"message": msg, "documentation_url": "https://docs.github.com/rest"})
                self._send(403, hdrs, payload.encode())
                return
            status, hdrs, out = fake.rest(self.command, path, seen.query, headers, body)
            seen.status = status
            hdrs = {"Content-Type": "application/json; charset=utf-8", "x-ratelimit-limit": "5000",
                    "x-ratelimit-remaining": "4999", "x-ratelimit-reset": str(int(time.time()) + 3600), **hdrs}
            self._send(status, hdrs, json.dumps(_public(out)).encode() if status != 204 else b"")

        def _git(self, path: str, query: str, headers: dict[str, str], raw: bytes) -> None:
            seen = Seen(self.command, path, parse_qs(query), headers, None)
            with fake.lock:
                fake.git_requests.append(seen)
            if not re.match(r"^/[^/]+/[^/]+\.git/", path):
                seen.status = 404
                self._send(404, {"Content-Type": "text/plain"}, b"Not Found")
                return
            if not fake.git_authorized(headers):
                seen.status = 401
                self._send(401, {"WWW-Authenticate": 'Basic realm="GitHub"', "Content-Type": "text/plain"},
                           b"Authentication required")
                return
            status, hdrs, payload = fake.git_cgi(self.command, path, query, headers, raw)
            seen.status = status
            self._send(status, hdrs, payload)

        do_GET = _dispatch  # noqa: N815 - http.server's names
        do_POST = _dispatch  # noqa: N815
        do_PATCH = _dispatch  # noqa: N815
        do_DELETE = _dispatch  # noqa: N815

    return Handler


# ---- a fixture repository with a real bug and a failing test ----------------------------

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}).stdout.strip()


def make_fixture_repo(where: Path, files: dict[str, str] | None = None) -> tuple[Path, str]:
    """A bare repo (branch main) holding package ``calc`` whose ``add`` subtracts, and ``files``
    (path -> text: build files, a committed fixgraph table); returns (bare, head sha)."""
    work = where / "work"
    (work / "calc").mkdir(parents=True)
    (work / "tests").mkdir()
    (work / "calc" / "__init__.py").write_text(BUGGY)
    (work / "tests" / "test_calc.py").write_text(TEST)
    for rel, text in (files or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "calc")
    bare = where / "remote.git"
    _git(where, "clone", "-q", "--bare", str(work), str(bare))
    return bare, _git(bare, "rev-parse", "HEAD")


def fix_patch(new: str = FIXED) -> str:
    """A git-style diff turning the buggy module into ``new``."""
    import difflib

    lines = difflib.unified_diff(BUGGY.splitlines(keepends=True), new.splitlines(keepends=True),
                                 "a/calc/__init__.py", "b/calc/__init__.py")
    return "diff --git a/calc/__init__.py b/calc/__init__.py\n" + "".join(lines)


def reject_pushes(bare: Path, message: str = "GH006: Protected branch update failed") -> None:
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho 'error: {message}' >&2\nexit 1\n")
    hook.chmod(0o755)


def show(bare: Path, ref: str, path: str) -> str:
    return _git(bare, "show", f"{ref}:{path}")


# ---- webhook payloads as GitHub sends them ------------------------------------------------

def _repo_payload(full_name: str) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {"id": 1, "name": name, "full_name": full_name, "owner": {"login": owner, "type": "User"}}


def labeled_payload(full_name: str, number: int, label: str = "fixgraph", sender: str = "alice",
                    installation: int | None = None, title: str = "an issue") -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": "labeled", "label": {"name": label, "color": "ededed"},
        "issue": {"number": number, "title": title, "body": "", "labels": [{"name": label}],
                  "user": {"login": sender, "type": "User"}},
        "repository": _repo_payload(full_name), "sender": {"login": sender, "type": "User"}}
    if installation is not None:
        payload["installation"] = {"id": installation}
    return payload


def comment_payload(full_name: str, number: int, body: str, user: str = "alice", association: str = "OWNER",
                    installation: int | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": "created",
        "issue": {"number": number, "title": "an issue", "body": "", "user": {"login": "alice", "type": "User"}},
        "comment": {"id": 5, "body": body, "user": {"login": user, "type": "User"}, "author_association": association},
        "repository": _repo_payload(full_name), "sender": {"login": user, "type": "User"}}
    if installation is not None:
        payload["installation"] = {"id": installation}
    return payload


def _pr_payload(pr: dict[str, Any]) -> dict[str, Any]:
    return _public(dict(pr))


def review_payload(full_name: str, pr: dict[str, Any], review: dict[str, Any],
                   installation: int | None = None) -> dict[str, Any]:
    """``pull_request_review`` (submitted) for a review made with :meth:`FakeGitHub.review`."""
    payload: dict[str, Any] = {"action": "submitted", "review": _public(review), "pull_request": _pr_payload(pr),
                               "repository": _repo_payload(full_name), "sender": review["user"]}
    if installation is not None:
        payload["installation"] = {"id": installation}
    return payload


def review_comment_payload(full_name: str, pr: dict[str, Any], comment: dict[str, Any],
                           action: str = "created") -> dict[str, Any]:
    """``pull_request_review_comment`` for a comment made with :meth:`FakeGitHub.review_comment`."""
    return {"action": action, "comment": _public(comment), "pull_request": _pr_payload(pr),
            "repository": _repo_payload(full_name), "sender": comment["user"]}


def pr_comment_payload(full_name: str, pr: dict[str, Any], body: str, user: str = "alice",
                       association: str = "OWNER", action: str = "created") -> dict[str, Any]:
    """``issue_comment`` on a pull request (its issue object carries ``pull_request``, no head)."""
    issue = {"number": pr["number"], "title": pr["title"], "body": pr["body"], "state": pr["state"],
             "user": pr["user"], "pull_request": {"url": pr["url"]}}
    return {"action": action, "issue": issue,
            "comment": {"id": 6, "body": body, "user": {"login": user, "type": "User"},
                        "author_association": association},
            "repository": _repo_payload(full_name), "sender": {"login": user, "type": "User"}}
