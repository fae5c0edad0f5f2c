"""Can this machine run each task's tests: the env of each (repo, version), or the env inferred for a
task swebench has no spec for (named by what it is built from), checked without building
it (``--check``, and the start of every run) or built (``--prepare``).

A task whose env cannot be built is scored without tests (the semantic judgment alone); the run
says how many and why before its first LLM call, so nobody reads a semantic score as a tested one.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import clone_holds, clone_path
from scoring.execution.compiled import missing_system_packages
from scoring.execution.envs import HARNESS_PYTHON, VenvEnvs, env_record, machine_fault
from scoring.execution.interpreters import resolve
from scoring.execution.testenv import EnvError

State = Literal["built", "substitute", "to build", "failed", "missing"]
# States whose tasks will run their tests ("to build": the check found nothing against it).
RUNNABLE: frozenset[str] = frozenset({"built", "substitute", "to build"})


@dataclass(frozen=True)
class EnvReport:
    env: str  # "django/django 3.0", "acme/calc inferred 1a2b3c4d"
    python: str  # the X.Y used or needed
    state: State
    reason: str  # one line: why not runnable, or the substitute / provisioning said
    tasks: tuple[str, ...]  # instance ids that need this env
    seconds: float | None = None  # the build's, when built

    @property
    def runnable(self) -> bool:
        return self.state in RUNNABLE


def venv_envs(cache_dir: Path, settings: TestSettings) -> VenvEnvs:
    return VenvEnvs(settings.env_dir or cache_dir / "envs", cache_dir, settings)


def inferred_spec(envs: VenvEnvs, task: Task) -> dict[str, Any] | str | None:
    """The env inferred for a task swebench has no spec for, read from the cached clone's copy of its
    base commit as the build reads it: the spec, or why there is none (a committed table that cannot be
    used). None when swebench has a spec, or no clone holds the commit yet (the build infers it)."""
    if task.version and envs.specs(task.repo, task.version) is not None:
        return None
    if not clone_holds(envs.cache_dir, task.repo, task.base_commit):
        return None
    clone = clone_path(envs.cache_dir, task.repo)
    try:
        return envs.spec_in(task, clone)
    except EnvError as exc:
        return str(exc).splitlines()[0][:300] if str(exc) else "the committed fixgraph table cannot be used"


def env_name(task: Task, inferred: dict[str, Any] | str | None = None) -> str:
    """"django/django 3.0"; an inferred env by what it is built from: "acme/calc inferred 1a2b3c4d"."""
    if isinstance(inferred, dict):
        return f"{task.repo} inferred {str(inferred.get('env_key', ''))[:8]}"
    return f"{task.repo} {task.version}".rstrip()


def by_env(tasks: Iterable[Task], envs: VenvEnvs | None = None) -> dict[str, list[Task]]:
    """The tasks of each env; with ``envs``, tasks without a spec are grouped by the env inferred for
    their commit (the issues of one repository share it while its dependency files stay the same)."""
    out: dict[str, list[Task]] = {}
    for task in tasks:
        out.setdefault(env_name(task, inferred_spec(envs, task) if envs else None), []).append(task)
    return out


def recorded(envs: VenvEnvs, task: Task, inferred: dict[str, Any] | None = None) -> EnvReport | None:
    """What the env's own record says, when it was built (or failed) before; None otherwise."""
    meta = env_record(envs.env_path(task, inferred))
    if meta is None or machine_fault(meta):
        return None  # said again from the machine as it is now: what it lacked may be installed since
    env = env_name(task, inferred)
    python = str(meta.get("python_version") or meta.get("wanted_python") or "?")
    if meta.get("ok"):
        sub = meta.get("python_how") == "substitute"
        return EnvReport(env, python, "substitute" if sub else "built", str(meta.get("python_note", "")) if sub else "",
                         (task.instance_id,), meta.get("seconds"))
    return EnvReport(env, python, "failed", str(meta.get("reason", "unknown build failure")).splitlines()[0][:300],
                     (task.instance_id,), meta.get("seconds"))


def check_env(task: Task, cache_dir: Path, settings: TestSettings, envs: VenvEnvs | None = None) -> EnvReport:
    """The env ``task`` needs, without building anything or downloading an interpreter."""
    ids = (task.instance_id,)
    if settings.backend != "venv":
        return EnvReport(env_name(task), "-", "to build", f"{settings.backend} backend: not checked ahead", ids)
    envs = envs or venv_envs(cache_dir, settings)
    inferred = inferred_spec(envs, task)
    if isinstance(inferred, str):
        return EnvReport(env_name(task), "-", "failed", inferred, ids)
    env = env_name(task, inferred)
    done = recorded(envs, task, inferred)
    if done is not None:
        return done
    spec = inferred or (envs.specs(task.repo, task.version) if task.version else None)
    if spec is None:  # no clone holds the commit yet: the build infers the env (scoring.execution.infer)
        return EnvReport(env, "-", "to build", "no swebench spec: inferred from the repository's own files "
                         "when built", ids)
    wanted = settings.python or HARNESS_PYTHON.get((task.repo, task.version)) or str(spec.get("python", "3"))
    got = resolve(wanted, cache_dir=cache_dir, provision=False, repo=task.repo, version=task.version)
    lacks = missing_system_packages(task.repo)
    if lacks:
        return EnvReport(env, got.python, "missing", lacks, ids)
    if got.path is None and not got.provisionable:
        return EnvReport(env, got.python, "missing", got.reason, ids)
    note = got.reason if got.how == "substitute" else ""
    if got.path is None and got.how != "substitute":
        note = f"Python {got.python} not on this machine: uv will install it into the cache ({got.reason.split(': ', 1)[-1]})"
    if inferred:
        note = "; ".join(filter(None, [f"no swebench spec: inferred (python from {inferred['how'].get('python')})", note]))
    return EnvReport(env, got.python, "to build", note, ids)


def check_tasks(tasks: Iterable[Task], cache_dir: Path, settings: TestSettings) -> list[EnvReport]:
    """One report per env, naming the tasks behind it."""
    envs = venv_envs(cache_dir, settings)
    out = []
    for group in by_env(tasks, envs if settings.backend == "venv" else None).values():
        rep = check_env(group[0], cache_dir, settings, envs)
        out.append(replace(rep, tasks=tuple(t.instance_id for t in group)))
    return out


def build_env(task: Task, build: Callable[[Task], None], cache_dir: Path, settings: TestSettings,
              envs: VenvEnvs | None = None) -> EnvReport:
    """Build (or find built) ``task``'s env with ``build`` (which checks out the task and asks the
    env builder); the report is the env's record afterwards. ``envs``: the builder's own, so what it
    inferred of a commit is read once."""
    start = time.monotonic()
    envs = envs or venv_envs(cache_dir, settings)
    before = check_env(task, cache_dir, settings, envs)
    if before.state in ("missing", "built", "substitute"):
        return before  # a built env's record is the answer: no checkout, nothing asked of the builder
    try:
        build(task)
    except Exception as exc:  # noqa: BLE001 - a build's failure is a row of the table, not the end of the step
        after = _after(envs, task)
        if after is None or after.state != "failed":
            reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            return EnvReport(before.env, before.python, "failed", reason, before.tasks,
                             round(time.monotonic() - start, 1))
        return after
    after = _after(envs, task)
    return after or EnvReport(before.env, before.python, "built", "", before.tasks, round(time.monotonic() - start, 1))


def _after(envs: VenvEnvs, task: Task) -> EnvReport | None:
    """The env's record after a build: an inferred env's found by the spec the build's clone gives."""
    inferred = inferred_spec(envs, task)
    return recorded(envs, task, inferred if isinstance(inferred, dict) else None)


def summary_line(reports: list[EnvReport]) -> str:
    """"scored without tests: 2 tasks (matplotlib/matplotlib 3.6: needs libqhull-dev ...)", or ""."""
    bad = [r for r in reports if not r.runnable]
    if not bad:
        return ""
    n = sum(len(r.tasks) for r in bad)
    why = "; ".join(f"{r.env}: {r.reason}" for r in bad[:4]) + ("; ..." if len(bad) > 4 else "")
    return f"scored without tests: {n} task{'s' * (n != 1)} ({why})"
