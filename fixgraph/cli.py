"""The command line behind graph.py: settings first, then data, then the run.

Bad input ends with one line on stderr and exit code 2; nothing is written before the settings
and the task list have been checked.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dotenv import load_dotenv

from fixgraph.config import ConfigError, load_config
from fixgraph.dataset import DatasetError, Instance, load_dataset_any, select
from fixgraph.publish import Publisher
from fixgraph.records import RunLockedError, check_id
from fixgraph.workspace import WorkspaceError, preflight
from scoring.static import StaticAnalysisUnavailable, check_available


def fail(message: str) -> int:
    print(f"fixgraph: error: {message}", file=sys.stderr)
    return 2


def _check_inputs(run_id: str, instances: list[Instance], out_dirs: list[Path]) -> None:
    """Ids that name files, and folders that can be created, before any of them is."""
    try:
        check_id("--run-id", run_id)
        for inst in instances:
            check_id("instance_id", inst.instance_id)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for wanted in out_dirs:
        path = wanted.absolute()
        while not path.exists() and path != path.parent:
            path = path.parent
        if not path.is_dir():
            raise ConfigError(f"cannot create {wanted}: {path} is not a folder")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot create {wanted}: {path} is not writable")


def run_cli(args: argparse.Namespace) -> int:
    load_dotenv(override=False)
    try:
        cfg = load_config(args.config)
        cfg.require_llm()
        if cfg.critic.enabled and cfg.critic.static:
            check_available(cfg.critic)  # pyright missing: say so before any work
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.repos is not None and not args.repos.is_dir():
            raise ConfigError(f"--repos {args.repos} is not a folder")
        publisher: Publisher | None = None
        if not cfg.eval_mode:
            from fixgraph.github_pr import GitHubPublisher  # type: ignore[import-not-found]

            publisher = GitHubPublisher(cfg)
        instances = select(load_dataset_any(args.dataset, cfg.cache_dir), args.tasks)
        run_id = args.run_id or cfg.name
        _check_inputs(run_id, instances, [cfg.predictions_dir, cfg.runs_dir / run_id, cfg.cache_dir])
        preflight(cfg.cache_dir, args.repos, [(i.repo, i.base_commit) for i in instances])
        from fixgraph.runner import run_tasks

        summary = run_tasks(instances, cfg, run_id=run_id, repos=args.repos,
                            workers=args.workers, progress=not args.no_progress, publisher=publisher)
    except (ConfigError, DatasetError, WorkspaceError, StaticAnalysisUnavailable, RunLockedError) as exc:
        return fail(str(exc))
    print(summary.line())
    print(f"predictions: {summary.predictions}")
    return 0
