"""A local checkout's inferred environment, built, and its test command run at a commit: what
``python graph.py --check --repo DIR`` shows a maintainer before installing the bot, and what
``eval.anyrepo_bench`` measures on many repositories.

The base run is bounded (``timeout_s``); a run its bound stops reports the tests that finished.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import Worktree
from scoring.execution.envs import VenvEnvs, env_record
from scoring.execution.infer import ConfigError, describe, git_output, infer_at
from scoring.execution.runner import SubprocessRunner
from scoring.execution.testenv import PASSING, EnvError, Suite


class CheckError(ValueError):
    """Input the check cannot use (not a git checkout, no such commit); one line for the user."""


@dataclass
class RepoCheck:
    repo: str
    commit: str
    description: str = ""  # how the env was made, one part a line
    built: bool = False
    reason: str = ""  # why the env or the run failed ("" when both went through)
    build_seconds: float = 0.0
    statuses: dict[str, str] = field(default_factory=dict)
    run_seconds: float = 0.0
    timed_out: bool = False
    log_tail: str = ""
    services: list[str] = field(default_factory=list)  # the declared services the run started, and where

    @property
    def collected(self) -> int:
        return len(self.statuses)

    @property
    def passed(self) -> int:
        return sum(s in PASSING for s in self.statuses.values())

    @property
    def skipped(self) -> int:
        return sum(s == "SKIPPED" for s in self.statuses.values())

    @property
    def pass_share(self) -> float:
        """Passing among the tests that ran (skipped ones did not)."""
        ran = self.collected - self.skipped
        return self.passed / ran if ran else 0.0


def _git(path: Path, *args: str) -> str:
    try:
        return git_output(path, *args).strip()
    except ConfigError as exc:
        raise CheckError(str(exc)) from None


def repo_name(path: Path) -> str:
    """``owner/name`` from the checkout's origin URL, else ``local/<folder>``: names the env's folder."""
    try:
        url = _git(path, "remote", "get-url", "origin")
    except CheckError:
        url = ""
    m = re.search(r"[:/]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url)
    return f"{m.group(1)}/{m.group(2)}" if m else f"local/{path.resolve().name}"


def resolve_commit(path: Path, rev: str) -> str:
    if not path.is_dir():
        raise CheckError(f"{path} is not a directory")
    return _git(path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


def check_repo(path: Path, settings: TestSettings, cache_dir: Path, rev: str = "HEAD", timeout_s: float = 600,
               repo: str = "") -> RepoCheck:
    """Infer, build and run the tests of ``rev`` of the git repository at ``path`` (a checkout or a
    bare mirror). swebench's specs are not asked: the check shows what inference makes of the
    repository. Raises CheckError on input it cannot use; a failed build or run is the result's
    ``reason``."""
    commit = resolve_commit(path, rev)
    name = repo or repo_name(path)
    out = RepoCheck(name, commit)
    try:
        out.description = describe(infer_at(path, commit))
    except ConfigError as exc:
        out.reason = str(exc)
        return out
    envs = VenvEnvs(settings.env_dir or cache_dir / "envs", cache_dir, settings, specs=lambda _repo, _version: None)
    task = Task(instance_id=f"check__{name.replace('/', '__')}", repo=name, base_commit=commit, problem_statement="")
    wt = Worktree(path, commit)
    start = time.monotonic()
    try:
        envs.get(task, wt)
    except EnvError as exc:
        out.reason = f"env not built: {exc}"
        return out
    finally:
        out.build_seconds = _build_seconds(envs, task, wt, time.monotonic() - start)
    out.built = True
    runner = SubprocessRunner(settings, cache_dir, envs, "venv")
    run = runner.run_suite(task, wt, None, Suite(targets=(), label="repo-check", timeout_s=timeout_s,
                                                 finished_on_timeout=True))
    out.statuses, out.run_seconds, out.timed_out = dict(run.statuses), run.seconds, run.timed_out
    out.log_tail = run.log_tail(1500)
    out.services = [n for n in run.notes if n.startswith("service ")]
    if run.error:
        out.reason = run.error
    elif not run.statuses:
        out.reason = "the test command reported no test"
    return out


def _build_seconds(envs: VenvEnvs, task: Task, wt: Worktree, waited: float) -> float:
    """The env's own build and install seconds when it recorded them (a reused env: its first build)."""
    try:
        meta = env_record(envs.env_path(task, envs.spec_for(task, wt))) or {}
    except EnvError:
        return round(waited, 1)
    return round(float(meta.get("seconds", 0) or 0) + float(meta.get("install_seconds", 0) or 0), 1) or round(waited, 1)


def report_lines(check: RepoCheck) -> list[str]:
    """What ``--check --repo`` prints: the env, its build, the run at the commit."""
    lines = [f"{check.repo} at {check.commit[:12]}", *("  " + ln for ln in check.description.splitlines())]
    if not check.built:
        return [*lines, f"  not runnable: {check.reason}"]
    lines.append(f"  env built ({check.build_seconds:g}s)")
    lines += [f"  {note}" for note in check.services]
    counts: dict[str, int] = {}
    for status in check.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no test"
    lines.append(f"  tests at {check.commit[:12]}: {summary} in {check.run_seconds:.0f}s"
                 + (" (stopped by its timeout; the tests that finished)" if check.timed_out else ""))
    if check.reason:
        lines.append(f"  not runnable: {check.reason}")
    else:
        lines.append(f"  pass share at the commit: {check.passed}/{check.collected - check.skipped} "
                     f"= {check.pass_share:.2f} (skipped left out)")
    return lines
