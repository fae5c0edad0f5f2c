"""The command line behind graph.py: settings first, then data, then the run.

Bad input ends with one line on stderr and exit code 2; nothing is written before the settings
and the task list have been checked. Heavy modules (LangGraph, the agents, the dataset hub) are
imported only once the input has been checked, so that mistakes are answered at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.models.discover import ROLES, endpoint_gate

if TYPE_CHECKING:
    from fixgraph.dataset import Instance, Task
    from pipeline.tasks import GraphFactory


def fail(message: str) -> int:
    print(f"fixgraph: error: {message}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument ends with one line and exit 2, as all bad input does (not
    argparse's usage block)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"fixgraph: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _creatable(path: Path) -> str:
    """Why a folder cannot be made in the existing folder ``path`` ("" when it can): the one way to
    know on a pseudo-filesystem (``/proc``, ``/sys``), where root's permission bits say yes."""
    try:
        probe = Path(tempfile.mkdtemp(prefix=".fixgraph-probe-", dir=path))
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    probe.rmdir()
    return ""


def _check_inputs(run_id: str, instances: list[Instance] | list[Task], out_dirs: list[Path]) -> None:
    """Ids that name files, and folders that can be created, before any of them is."""
    from fixgraph.records import check_id

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
        if not wanted.absolute().exists() and (why := _creatable(path)):
            raise ConfigError(f"cannot create {wanted}: no folder can be made in {path} ({why})")


def check_ray(cfg: RunConfig) -> None:
    """Ray installed, and the settings it needs: before the dataset is read or anything written."""
    from pipeline.executors import require_ray

    require_ray()
    if not cfg.eval_mode:
        # The bot publishes pull requests from one machine; Ray is for batch runs.
        raise ConfigError("--executor ray runs EVAL_MODE=true batches only")


def model_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--model`` for every role, ``--model-<role>`` for one; both above the config and env."""
    out: dict[str, str] = {}
    for role in ROLES:
        name = getattr(args, f"model_{role}", None) or getattr(args, "model", None)
        if name:
            out[f"llm.models.{role}"] = name
    return out


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """What the command line sets above the config and env: the models, and --require-tests."""
    return {**model_overrides(args), **({"critic.require_tests": True} if getattr(args, "require_tests", False) else {})}


def configure(args: argparse.Namespace) -> RunConfig:
    """The run's config with an LLM it can reach (a local server found, said in one line)."""
    from dotenv import load_dotenv

    from fixgraph.models.discover import local_servers, resolve_llm

    load_dotenv(override=False)
    cfg = load_config(args.config, overrides=overrides(args))
    cfg, found = resolve_llm(cfg, local_servers())
    if found:
        print(found, file=sys.stderr)
    return cfg


def check_all(args: argparse.Namespace) -> int:
    """``--check``: every part, the LLM's too when none can be set up (no key and no local server)."""
    from pipeline.preflight import print_report, run_checks

    try:
        cfg, llm_error = configure(args), ""
    except ConfigError as exc:
        cfg, llm_error = load_config(args.config, overrides=model_overrides(args)), str(exc)
    if args.executor == "ray":
        check_ray(cfg)
    ready = print_report(run_checks(cfg, llm_error=llm_error))
    if args.dataset is not None:  # the tasks' envs: only for a named dataset (the hub may be offline)
        from pipeline.prepare import run_check

        ready = run_check(load_tasks(args, cfg), cfg) and ready
    return 0 if ready else 1


def check_repo_cli(args: argparse.Namespace) -> int:
    """``--check --repo DIR``: the env inferred for the checkout, built, its tests run at HEAD."""
    from scoring.execution.repo_check import CheckError, check_repo, report_lines

    cfg = load_config(args.config)
    if cfg.tests.backend != "venv":
        raise ConfigError(f"--check --repo builds a venv; the config's test backend is {cfg.tests.backend}")
    try:
        check = check_repo(args.repo, cfg.tests, cfg.cache_dir, timeout_s=cfg.tests.timeout_s)
    except CheckError as exc:
        raise ConfigError(str(exc)) from None
    print("\n".join(report_lines(check)))
    return 0 if check.built and not check.reason else 1


def load_instances(args: argparse.Namespace, cfg: RunConfig) -> list[Instance]:
    from fixgraph.dataset import DatasetError, hub_spec, load_dataset_any, select

    hub = hub_spec(args.dataset)
    if hub:
        from fixgraph.hub import HubError, prepare_hub

        try:  # offline: say so in seconds, not after the hub's retries
            prepare_hub(cfg.cache_dir, hub[0], revision=hub[1])
        except HubError as exc:
            raise DatasetError(str(exc)) from None
    return select(load_dataset_any(args.dataset, cfg.cache_dir), args.tasks)


def load_tasks(args: argparse.Namespace, cfg: RunConfig) -> list[Task]:
    return [i.task() for i in load_instances(args, cfg)]


def check_envs(instances: list[Instance], cfg: RunConfig, require_tests: bool) -> set[str]:
    """Before the first LLM call: which tasks will have no runnable tests, and why (on stderr). A set
    whose envs all fail stops here. Returns the ids of the tasks that cannot run their tests."""
    from scoring.execution.readiness import check_tasks, summary_line

    if not cfg.critic.enabled or cfg.critic.tests == "off" or cfg.tests.backend != "venv":
        return set()
    reports = check_tasks([i.task() for i in instances], cfg.cache_dir, cfg.tests)
    # Every env not runnable is the machine's fault (an interpreter, a library, a build): a
    # repository without install specs gets one inferred from its own files.
    bad = [r for r in reports if not r.runnable]
    if bad and len(bad) == len(reports):
        raise ConfigError(f"no task of this set can run its tests on this machine ({summary_line(bad)}); "
                          "see python graph.py --check --dataset ... for what to install")
    if bad:
        what = "will fail (--require-tests)" if require_tests else "will be scored without tests"
        print(f"fixgraph: {sum(len(r.tasks) for r in bad)} of {len(instances)} tasks {what}: "
              + summary_line(bad).split(" (", 1)[1].rstrip(")"), file=sys.stderr)
    return {t for r in bad for t in r.tasks}


def _outside_checkouts(cfg: RunConfig, repos: Path | None) -> None:
    """fixgraph's own folders never sit in a repository it checks out: what is there reaches the
    tests' copies and the repository's own scripts."""
    if repos is None:
        return
    for key in ("cache_dir", "runs_dir", "predictions_dir"):
        folder = getattr(cfg, key).resolve()
        if folder.is_relative_to(repos.resolve()):
            raise ConfigError(f"{key} {getattr(cfg, key)} is inside the repositories folder {repos}: put it elsewhere")


def run_cli(args: argparse.Namespace, build_graph: GraphFactory) -> int:
    from fixgraph.dataset import DatasetError
    from fixgraph.records import RunLockedError
    from fixgraph.repo.workspace import WorkspaceError
    from scoring.static.differential import StaticAnalysisUnavailable

    try:
        if args.workers is not None and args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.ray_address and args.executor != "ray":
            raise ConfigError("--ray-address needs --executor ray")
        if args.repos is not None and not args.repos.is_dir():
            raise ConfigError(f"--repos {args.repos} is not a folder")
        if getattr(args, "repo", None) is not None:
            if not getattr(args, "check", False):
                raise ConfigError("--repo goes with --check")
            return check_repo_cli(args)
        if getattr(args, "check", False):
            return check_all(args)
        if getattr(args, "prepare", False):
            from pipeline.prepare import run_prepare

            cfg = load_config(args.config)
            return run_prepare(load_tasks(args, cfg), cfg, args.repos, args.workers or 1, not args.no_progress)
        cfg = configure(args)
        _outside_checkouts(cfg, args.repos)
        if args.executor == "ray":
            check_ray(cfg)
        instances = load_instances(args, cfg)
        if cfg.critic.enabled and cfg.critic.static:
            from scoring.static.differential import check_available

            check_available(cfg.critic)  # pyright missing: say so before any work
        from fixgraph.publish import Publisher

        publisher: Publisher | None = None
        if not cfg.eval_mode:
            from fixgraph.github.pr import GitHubPublisher

            publisher = GitHubPublisher(cfg)
        run_id = args.run_id or cfg.label
        _check_inputs(run_id, instances, [cfg.predictions_dir, cfg.runs_dir / run_id, cfg.cache_dir])
        from fixgraph.repo.workspace import preflight

        preflight(cfg.cache_dir, args.repos, [(i.repo, i.base_commit) for i in instances])
        executor = None
        if args.executor == "ray":
            from pipeline.executors import RayExecutor

            executor = RayExecutor.start(cfg, args.ray_address, max_in_flight=args.workers)
        try:
            # Before the heavy imports and the first task's localization: a dead endpoint is
            # answered in seconds, not after every task's index and retries.
            endpoint_gate(cfg)
            check_envs(instances, cfg, cfg.critic.require_tests)  # before the first task's LLM call
            from pipeline.tasks import run_tasks

            summary = run_tasks(instances, cfg, build_graph=build_graph, run_id=run_id,
                                repos=args.repos, workers=args.workers or 1, progress=not args.no_progress,
                                event_lines=args.no_progress,
                                publisher=publisher, executor=executor,
                                endpoint_check=lambda: endpoint_gate(cfg))
        finally:
            if executor is not None:
                executor.close()
    except (ConfigError, DatasetError, WorkspaceError, StaticAnalysisUnavailable, RunLockedError) as exc:
        return fail(str(exc))
    print(summary.line())
    print(summary.predictions_line())
    left = summary.total - summary.skipped - summary.finished
    if summary.halted and left:
        return fail(f"{summary.halted}; {left} task(s) not started: run the same command again to resume")
    if fault := summary.common_fault():
        print(f"fixgraph: every task failed the same way ({fault}): fix that and run the same command "
              "again to resume", file=sys.stderr)
        return 1
    return 0
