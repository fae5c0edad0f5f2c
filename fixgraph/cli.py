"""The command line behind graph.py: settings first, then data, then the run.

Bad input ends with one line on stderr and exit code 2; nothing is written before the settings
and the task list have been checked. Heavy modules (LangGraph, the agents, the dataset hub) are
imported only once the input has been checked, so that mistakes are answered at once.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.discover import ROLES

if TYPE_CHECKING:
    from fixgraph.runner import GraphFactory


def fail(message: str) -> int:
    print(f"fixgraph: error: {message}", file=sys.stderr)
    return 2


def model_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--model`` for every role, ``--model-<role>`` for one; both above the config and env."""
    out: dict[str, str] = {}
    for role in ROLES:
        name = getattr(args, f"model_{role}", None) or getattr(args, "model", None)
        if name:
            out[f"llm.models.{role}"] = name
    return out


def configure(args: argparse.Namespace) -> RunConfig:
    """The run's config with an LLM it can reach (a local server found, said in one line)."""
    from dotenv import load_dotenv

    from fixgraph.discover import local_servers, resolve_llm

    load_dotenv(override=False)
    cfg = load_config(args.config, overrides=model_overrides(args))
    cfg, found = resolve_llm(cfg, local_servers())
    if found:
        print(found, file=sys.stderr)
    return cfg


def run_cli(args: argparse.Namespace, build_graph: GraphFactory) -> int:
    from fixgraph.dataset import DatasetError
    from fixgraph.workspace import WorkspaceError
    from scoring.static import StaticAnalysisUnavailable

    try:
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.repos is not None and not args.repos.is_dir():
            raise ConfigError(f"--repos {args.repos} is not a folder")
        cfg = configure(args)
        if getattr(args, "check", False):
            from fixgraph.preflight import print_report, run_checks

            return 0 if print_report(run_checks(cfg)) else 1
        from fixgraph.dataset import load_dataset_any, select

        if args.dataset is None:
            from fixgraph.hub import prepare_hub

            prepare_hub(cfg.cache_dir)  # offline: say so in seconds, not after the hub's retries
        instances = select(load_dataset_any(args.dataset, cfg.cache_dir), args.tasks)
        if cfg.critic.enabled and cfg.critic.static:
            from scoring.static import check_available

            check_available(cfg.critic)  # pyright missing: say so before any work
        from fixgraph.publish import Publisher

        publisher: Publisher | None = None
        if not cfg.eval_mode:
            from fixgraph.github_pr import GitHubPublisher

            publisher = GitHubPublisher(cfg)
        from fixgraph.runner import run_tasks

        summary = run_tasks(instances, cfg, build_graph=build_graph, run_id=args.run_id or cfg.label,
                            repos=args.repos, workers=args.workers, progress=not args.no_progress,
                            publisher=publisher)
    except (ConfigError, DatasetError, WorkspaceError, StaticAnalysisUnavailable) as exc:
        return fail(str(exc))
    print(summary.line())
    print(f"predictions: {summary.predictions}")
    return 0
