"""``graph.py --prepare``: clone and build every env a task set needs, before any run; and the table
that ``--prepare``, ``--check`` and the start of a run print.

Envs build in parallel up to ``--workers``. A built env is recorded (``env.json``, written once the
build is whole), so a second call only reads records, and a call killed midway resumes: the half-built
env has no record and is rebuilt from scratch, never used.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from scoring.execution.envs import VenvEnvs
from scoring.execution.readiness import EnvReport, build_env, by_env, check_tasks, venv_envs


def table(reports: Sequence[EnvReport], out: Callable[[str], None] = print) -> None:
    out(f"{'env':<34} {'tasks':>5}  {'python':<6}  {'state':<10}  {'seconds':>7}  why")
    for r in sorted(reports, key=lambda r: r.env):
        secs = f"{r.seconds:.0f}" if r.seconds is not None else "-"
        out(f"{r.env:<34} {len(r.tasks):>5}  {r.python:<6}  {r.state:<10}  {secs:>7}  {r.reason}")


def builder(cfg: RunConfig, repos: Path | None, tasks: Sequence[Task] = (),
            envs: VenvEnvs | None = None) -> Callable[[Task], None]:
    """Checks the task out and asks the env builder (``envs``, or a new one) for its env: what a test
    run would do first. The repositories of ``tasks`` without a spec are cloned first: their envs are
    named by what each commit's files infer, so tasks that share one are built once and those that do
    not each get theirs."""
    from fixgraph.repo.workspace import RepoCache, WorkspaceError

    cache = RepoCache(cfg.cache_dir, repos)
    envs = envs or venv_envs(cfg.cache_dir, cfg.tests)
    for task in tasks:
        if not (task.version and envs.specs(task.repo, task.version)):
            try:
                cache.ensure_clone(task.repo, task.base_commit)
            except WorkspaceError:
                pass  # the task's build says so in its row

    def build(task: Task) -> None:
        wt = cache.worktree(task.repo, task.base_commit, f"prepare-{task.instance_id}")
        try:
            envs.get(task, wt)
        finally:
            cache.remove_worktree(task.repo, wt)

    return build


def prepare(tasks: Sequence[Task], cfg: RunConfig, repos: Path | None, workers: int = 1,
            progress: bool = True) -> list[EnvReport]:
    from tqdm import tqdm

    envs = venv_envs(cfg.cache_dir, cfg.tests)  # one builder: the grouping, the builds and their records
    build = builder(cfg, repos, tasks, envs)
    groups = by_env(tasks, envs)
    reports: list[EnvReport] = []
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=len(groups), desc="envs", unit="env", disable=not progress, file=sys.stderr) as bar:
        futures = {pool.submit(build_env, group[0], build, cfg.cache_dir, cfg.tests, envs): group
                   for group in groups.values()}
        for fut in as_completed(futures):
            rep = fut.result()
            reports.append(EnvReport(rep.env, rep.python, rep.state, rep.reason,
                                     tuple(t.instance_id for t in futures[fut]), rep.seconds))
            bar.set_postfix_str(f"{rep.env}: {rep.state}")
            bar.update()
    return reports


def run_prepare(tasks: Sequence[Task], cfg: RunConfig, repos: Path | None, workers: int, progress: bool) -> int:
    start = time.monotonic()
    reports = prepare(tasks, cfg, repos, workers, progress)
    table(reports)
    bad = [r for r in reports if not r.runnable]
    print(f"{len(reports) - len(bad)} of {len(reports)} envs ready for {len(tasks)} tasks "
          f"in {time.monotonic() - start:.1f} s")
    return 1 if bad else 0


def run_check(tasks: Sequence[Task], cfg: RunConfig) -> bool:
    """The env part of ``--check``: True when every env is built or can be."""
    reports = check_tasks(tasks, cfg.cache_dir, cfg.tests)
    table(reports)
    bad = [r for r in reports if not r.runnable]
    if bad:
        print(f"{sum(len(r.tasks) for r in bad)} of {len(tasks)} tasks would be scored without tests; "
              "each row says what to install (then: python graph.py --prepare)")
    return not bad
