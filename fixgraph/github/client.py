"""GitHub access: a personal/fine-grained token, or a GitHub App's installation tokens.

Used by publishing (fixgraph/github/pr.py), the bot and the preflight; it depends on no bot module.

Every client points at ``cfg.github.base_url`` (GitHub Enterprise: ``https://HOST/api/v3``), keeps
GitHub's pauses between calls, and waits on rate limits: PyGithub's ``GithubRetry`` sleeps for
``Retry-After`` or until ``x-ratelimit-reset`` (up to ``rate_limit_max_wait_s``), then retries.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from github import Auth, Github, GithubIntegration, GithubRetry

from fixgraph.config import ConfigError, RunConfig

# Where git gets the token at the moment it needs it (installation tokens expire).
TokenSource = Callable[[], str | None]

# Environment variables holding secrets; the bot drops them from os.environ once the config has
# read them, so no child process (git, pytest, pyright) inherits one.
SECRET_ENV = ("GITHUB_TOKEN", "GITHUB_APP_PRIVATE_KEY", "GITHUB_WEBHOOK_SECRET", "OPENAI_API_KEY", "GH_TOKEN")


def repo_allowed(repo: str, allowlist: tuple[str, ...]) -> bool:
    """An empty allowlist allows nothing: fixgraph acts only where it was told to."""
    return any(fnmatch.fnmatch(repo.lower(), pattern.lower()) for pattern in allowlist)


def scrub_environ() -> None:
    for var in SECRET_ENV:
        os.environ.pop(var, None)


@dataclass
class Session:
    """One job's view of GitHub: the API client and where git gets its token."""

    gh: Github
    token: TokenSource


def _private_key(raw: str) -> str:
    # A PEM is awkward in .env, so a path to the .pem file is accepted too.
    if raw.lstrip().startswith("-----BEGIN"):
        return raw
    path = Path(raw).expanduser()
    if not path.is_file():
        raise ConfigError("GITHUB_APP_PRIVATE_KEY is neither a PEM key nor the path of a readable .pem file")
    return path.read_text()


class GitHubAccess:
    def __init__(self, cfg: RunConfig):
        gh = cfg.github
        self.cfg = cfg
        self.token = gh.token.get_secret_value() if gh.token else None
        self.app_auth: Auth.AppAuth | None = None
        if gh.app_id is not None:
            if gh.app_private_key is None:
                raise ConfigError("GITHUB_APP_ID is set but GITHUB_APP_PRIVATE_KEY is not")
            self.app_auth = Auth.AppAuth(gh.app_id, _private_key(gh.app_private_key.get_secret_value()))
        elif not self.token:
            raise ConfigError("set GITHUB_TOKEN, or GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY, to reach GitHub")
        self._lock = threading.Lock()
        self._installations: dict[int, Auth.AppInstallationAuth] = {}

    def _kwargs(self) -> dict[str, object]:
        gh = self.cfg.github
        retry = GithubRetry(total=6, backoff_factor=0.5, max_rate_limit_wait=gh.rate_limit_max_wait_s,
                            secondary_rate_wait=min(60.0, gh.rate_limit_max_wait_s))
        return {"base_url": gh.base_url.rstrip("/"), "timeout": int(gh.timeout_s), "retry": retry,
                "per_page": 100, "seconds_between_requests": gh.request_pause_s or None,
                "seconds_between_writes": gh.write_pause_s or None}

    def installation_for(self, repo: str) -> int:
        """The App's installation on ``repo`` (polling has no event to say it)."""
        if self.cfg.github.app_installation_id is not None:
            return self.cfg.github.app_installation_id
        assert self.app_auth is not None
        integration = GithubIntegration(auth=self.app_auth, **self._kwargs())  # type: ignore[arg-type]
        owner, name = repo.split("/", 1)
        return integration.get_repo_installation(owner, name).id

    def session(self, installation_id: int | None = None, repo: str | None = None) -> Session:
        if self.app_auth is None:
            token = self.token
            return Session(Github(auth=Auth.Token(token or ""), **self._kwargs()), lambda: token)  # type: ignore[arg-type]
        if installation_id is None:
            if repo is None:
                raise ConfigError("a GitHub App needs an installation id or a repository")
            installation_id = self.installation_for(repo)
        with self._lock:
            # One auth object per installation, so its token is fetched once and refreshed before
            # expiry (PyGithub does that when .token is read), not minted per job.
            auth = self._installations.get(installation_id)
            if auth is None:
                auth = self.app_auth.get_installation_auth(installation_id)
                self._installations[installation_id] = auth
        gh = Github(auth=auth, **self._kwargs())  # type: ignore[arg-type]
        return Session(gh, lambda: auth.token)
