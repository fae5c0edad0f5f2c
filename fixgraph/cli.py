"""The command line behind graph.py: settings first, then data, then the run.

Bad input ends with one line on stderr and exit code 2; nothing is written before the settings
and the task list have been checked.
"""

from __future__ import annotations

import argparse
import sys

from dotenv import load_dotenv

from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.dataset import DatasetError, load_dataset_any, select
from fixgraph.executors import ExecutorError, RayExecutor, require_ray
from fixgraph.publish import Publisher
from fixgraph.workspace import WorkspaceError
from scoring.static import StaticAnalysisUnavailable, check_available


def fail(message: str) -> int:
    print(f"fixgraph: error: {message}", file=sys.stderr)
    return 2


def check_ray(cfg: RunConfig) -> None:
    """Ray installed, and the settings it needs: before the dataset is read or anything written."""
    require_ray()
    if not cfg.eval_mode:
        # The bot publishes pull requests from one machine; Ray is for batch runs.
        raise ConfigError("--executor ray runs EVAL_MODE=true batches only")


def run_cli(args: argparse.Namespace) -> int:
    load_dotenv(override=False)
    try:
        cfg = load_config(args.config)
        cfg.require_llm()
        if cfg.critic.enabled and cfg.critic.static:
            check_available(cfg.critic)  # pyright missing: say so before any work
        if args.workers is not None and args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.ray_address and args.executor != "ray":
            raise ConfigError("--ray-address needs --executor ray")
        if args.executor == "ray":
            check_ray(cfg)
        if args.repos is not None and not args.repos.is_dir():
            raise ConfigError(f"--repos {args.repos} is not a folder")
        publisher: Publisher | None = None
        if not cfg.eval_mode:
            from fixgraph.github_pr import GitHubPublisher  # type: ignore[import-not-found]

            publisher = GitHubPublisher(cfg)
        instances = select(load_dataset_any(args.dataset, cfg.cache_dir), args.tasks)
        from fixgraph.runner import run_tasks

        executor = None
        if args.executor == "ray":
            executor = RayExecutor.start(cfg, args.ray_address, max_in_flight=args.workers)
        try:
            summary = run_tasks(instances, cfg, run_id=args.run_id or cfg.label, repos=args.repos,
                                workers=args.workers or 1, progress=not args.no_progress, publisher=publisher,
                                executor=executor)
        finally:
            if executor is not None:
                executor.close()
    except (ConfigError, DatasetError, WorkspaceError, StaticAnalysisUnavailable, ExecutorError) as exc:
        return fail(str(exc))
    print(summary.line())
    print(f"predictions: {summary.predictions}")
    return 0
