"""Run several configs on the same tasks, then score each with the official harness (or the local grader).

    python -m eval.run --configs baseline,static,redo --tasks stratified50 \\
        [--dataset PATH] [--repos DIR] [--workers N] [--run-prefix P] [--runs-dir runs] [--modal]
        [--harness official|local|none]

Each config gets its own run id, ``<prefix>-<config>``, and its own folder ``runs/<run_id>/``
(records, checkpoints, and ``predictions/`` with the ``.diff`` files and the official JSONL), so
configs never overwrite each other. Running the same command again resumes: finished tasks are
skipped and a task in flight restarts from its last checkpoint. A run id already holding a run of
another config (or of the same config with different settings) is refused.

With ``--workers`` at least the number of configs, the configs run side by side and share the
workers; with fewer, they run one after another with ``--workers`` tasks at a time. Then, per config, the
predictions go to ``python -m swebench.harness.run_evaluation`` when a Docker engine answers (or
with ``--modal``); otherwise the exact commands, and the sb-cli alternative, are printed. With
``--harness local`` they go to the local grader instead (``eval.grade``: no Docker, this machine's
environments; every verdict marked ``local``, never a SWE-bench result), then into the records;
``--harness none`` stops after the configs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from dotenv import load_dotenv

from eval.dashboard.rundata import RUN_META, read_json
from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.dataset import DATASET_HELP, DatasetError, Instance, hub_name, load_dataset_any, select
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import WorkspaceError
from pipeline.tasks import RunSummary

# sb-cli's name for each hub set it hosts (it has none for the full set).
SB_CLI_SUBSETS = {"SWE-bench/SWE-bench_Lite": "swe-bench_lite", "SWE-bench/SWE-bench_Verified": "swe-bench_verified"}
# Settings that say where things are or how to reach a server, not how the pipeline behaves:
# a resumed run may change them (a new server port, another cache) and still be the same run.
NOT_IDENTITY: dict[str, Any] = {
    "llm": {"base_url", "api_key", "timeout_s", "max_retries"},
    "budget": {"run_dollars"},
    "tests": {"env_dir"},
    "github": True, "cache_dir": True, "predictions_dir": True, "runs_dir": True,
}

# The harness is a subprocess; tests replace this to see the command without a Docker engine.
HarnessRunner = Callable[[Sequence[str]], int]


def _run_subprocess(cmd: Sequence[str]) -> int:
    return subprocess.run(list(cmd), check=False).returncode


HARNESS_RUNNER: HarnessRunner = _run_subprocess


class RunIdError(Exception):
    """A run id is already taken by something else; one line for the user."""


# ---- run ids ------------------------------------------------------------------------------


def identity(cfg: RunConfig) -> dict[str, Any]:
    """The settings that make two runs comparable, flattened to dotted keys."""
    return _flatten(cfg.model_dump(mode="json", exclude=NOT_IDENTITY))


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value and key != "prices":
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def claim_run_id(runs_dir: Path, run_id: str, cfg: RunConfig, task_ids: list[str]) -> None:
    """Record which config ``run_id`` belongs to, or refuse when it belongs to another."""
    run_dir = runs_dir / run_id
    meta = read_json(run_dir / RUN_META)
    mine = identity(cfg)
    if isinstance(meta, dict):
        theirs = meta.get("config")
        if theirs != cfg.name:
            raise RunIdError(f"run id {run_id!r} already holds a run of config {theirs!r}, not {cfg.name!r}; "
                             "pick another --run-prefix")
        old = meta.get("settings") or {}
        changed = sorted(k for k in set(old) | set(mine) if old.get(k) != mine.get(k))
        if changed:
            first = changed[0]
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            raise RunIdError(f"run id {run_id!r} holds config {cfg.name!r} with other settings: {first} was "
                             f"{old.get(first)!r}, is {mine.get(first)!r}{more}; pick another --run-prefix")
    # A run started by graph.py under this id has records but no run.json: check those too.
    for rec_path in sorted((run_dir / "records").glob("*.json")):
        rec = read_json(rec_path)
        if isinstance(rec, dict) and rec.get("config") not in (None, cfg.name):
            raise RunIdError(f"run id {run_id!r} already has records of config {rec.get('config')!r} "
                             f"({rec_path.name}), not {cfg.name!r}; pick another --run-prefix")
    if isinstance(meta, dict):
        tasks = list(dict.fromkeys([*(meta.get("tasks") or []), *task_ids]))
        created = meta.get("created_at")
    else:
        tasks, created = task_ids, dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    atomic_write(run_dir / RUN_META, json.dumps(
        {"run_id": run_id, "config": cfg.name, "settings": mine, "tasks": tasks, "created_at": created},
        indent=2, sort_keys=True) + "\n")


# ---- the official harness -------------------------------------------------------------------


def docker_answers() -> bool:
    """True when a Docker engine answers a ping (DOCKER_HOST or the default socket)."""
    try:
        import docker  # the harness's own dependency

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no socket, no permission, no engine: all mean "not here"
        return False


def harness_command(preds: Path, run_id: str, *, dataset: str, workers: int, report_dir: Path,
                    modal: bool, python: str = "python") -> list[str]:
    cmd = [python, "-m", "swebench.harness.run_evaluation", "-d", dataset, "-p", str(preds),
           "-id", run_id, "--max_workers", str(workers), "--report_dir", str(report_dir)]
    return cmd + (["--modal", "true"] if modal else [])


def harness_dataset(args: argparse.Namespace) -> str:
    """The harness grades against the set the configs ran: --harness-dataset, else --dataset's hub
    set, else its JSONL path (the harness reads a local file too)."""
    if args.harness_dataset:
        return args.harness_dataset
    return hub_name(args.dataset) or str(Path(args.dataset).resolve())


def sb_cli_commands(preds: Path, run_id: str, report_dir: Path, subset: str) -> list[list[str]]:
    return [["sb-cli", "submit", subset, "test", "--predictions_path", str(preds), "--run_id", run_id],
            ["sb-cli", "get-report", subset, "test", run_id, "-o", str(report_dir)]]


def score_runs(runs: list[tuple[str, Path]], runs_dir: Path, *, dataset: str, workers: int, modal: bool,
               engine: bool) -> int:
    """Send each run's predictions to the harness, or print how to. Returns the number of failures."""
    failures = 0
    ready = [(run_id, preds) for run_id, preds in runs if preds.is_file()]
    for run_id, preds in runs:
        if not preds.is_file():
            print(f"{run_id}: no predictions file ({preds}); nothing to score", file=sys.stderr)
    if not ready:
        return failures
    if engine or modal:
        from eval.dashboard.rundata import load_run
        from eval.ingest import DEFAULT_LOGS, ingest_run

        for run_id, preds in ready:
            cmd = harness_command(preds, run_id, dataset=dataset, workers=workers,
                                  report_dir=runs_dir / run_id, modal=modal, python=sys.executable)
            print(f"{run_id}: {shlex.join(cmd)}", flush=True)
            code = HARNESS_RUNNER(cmd)
            if code != 0:
                failures += 1
                print(f"{run_id}: the harness exited with {code}", file=sys.stderr)
                continue
            run = load_run(runs_dir / run_id)
            if run is not None:
                res = ingest_run(run, [DEFAULT_LOGS], [Path.cwd()])
                print(f"{run_id}: {res.with_harness} of {res.total} tasks have harness results")
        print(f"next: python -m eval.dashboard {runs_dir} -o dashboard.html")
        return failures
    print("\nNo Docker engine answers here, so the official harness was not run. To score these runs,")
    print("on a machine with Docker, from this folder:")
    for run_id, preds in ready:
        print("  " + shlex.join(harness_command(preds, run_id, dataset=dataset, workers=workers,
                                                report_dir=runs_dir / run_id, modal=False)))
    subset = SB_CLI_SUBSETS.get(dataset)
    if subset is None:
        print("or on Modal: add --modal true to each command above.")
    else:
        print("or on Modal: add --modal true to each command above; or hosted, with sb-cli (needs SWEBENCH_API_KEY):")
        for run_id, preds in ready:
            for cmd in sb_cli_commands(preds, run_id, runs_dir / run_id, subset):
                print("  " + shlex.join(cmd))
    print(f"then: python -m eval.ingest {runs_dir} && python -m eval.dashboard {runs_dir} -o dashboard.html")
    return failures


def score_runs_local(runs: list[tuple[str, Path]], runs_dir: Path, instances: list[Instance], *,
                     repos: Path | None, cache_dir: Path, workers: int, backend: str = "venv",
                     progress: bool = True) -> int:
    """Grade each run's predictions with the local grader (resuming what it graded before), then
    put the verdicts in the records. Returns the number of runs that could not be graded."""
    from eval.dashboard.rundata import load_run
    from eval.grade import DEFAULT_LOGS, GradeError, GradeRun, grade_predictions, headline, read_predictions
    from eval.ingest import ingest_run

    by_id = {i.instance_id: i for i in instances}
    failures = 0
    for run_id, preds in runs:
        if not preds.is_file():
            print(f"{run_id}: no predictions file ({preds}); nothing to grade", file=sys.stderr)
            continue
        try:
            loaded = read_predictions(preds, set(by_id))
            cfg = GradeRun(run_id=run_id, instances=by_id, repos=repos, cache_dir=cache_dir, logs=DEFAULT_LOGS,
                           report_dir=runs_dir / run_id, workers=workers, resume=True, backend=backend,
                           progress=progress)
            out = grade_predictions(cfg, loaded)
        except GradeError as exc:
            failures += 1
            print(f"{run_id}: the local grader failed: {exc}", file=sys.stderr)
            continue
        for line in loaded.problems:
            print(f"warning: {line}", file=sys.stderr)
        print(f"{run_id}: {headline(out)} (grader: {cfg.label})", flush=True)
        run = load_run(runs_dir / run_id)
        if run is not None:
            res = ingest_run(run, [DEFAULT_LOGS], [])
            print(f"{run_id}: {res.with_harness} of {res.total} tasks have local grader results")
    print(f"next: python -m eval.dashboard {runs_dir} -o dashboard.html")
    return failures


# ---- running the configs ----------------------------------------------------------------------


def worker_shares(workers: int, n_configs: int) -> list[int] | None:
    """Workers per config when all configs run at once, or None to run them one after another.

    Running them side by side (when there is at least one worker each) keeps the comparison fair:
    the configs meet the same LLM server load, and a run stopped early leaves every config with
    some tasks rather than the first config with all of them.
    """
    if n_configs < 2 or workers < n_configs:
        return None
    return [workers // n_configs + (i < workers % n_configs) for i in range(n_configs)]


def run_configs(plan: list[tuple[str, RunConfig]], instances: list[Instance], *, repos: Path | None,
                workers: int, progress: bool) -> list[RunSummary]:
    from graph import build_graph
    from pipeline.tasks import run_tasks

    shares = worker_shares(workers, len(plan))
    if shares is None:
        summaries = []
        for run_id, cfg in plan:
            print(f"{run_id}: config {cfg.name}, {len(instances)} tasks, {workers} at a time", flush=True)
            summary = run_tasks(instances, cfg, build_graph=build_graph, run_id=run_id, repos=repos, workers=workers, progress=progress)
            print(summary.line(), flush=True)
            summaries.append(summary)
        return summaries

    for (run_id, cfg), share in zip(plan, shares, strict=True):
        print(f"{run_id}: config {cfg.name}, {len(instances)} tasks, {share} at a time", flush=True)
    pool = ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="config")
    # One progress bar per run would fight over the terminal: count finished records instead.
    futures = [pool.submit(run_tasks, instances, cfg, build_graph=build_graph, run_id=run_id, repos=repos, workers=share, progress=False)
               for (run_id, cfg), share in zip(plan, shares, strict=True)]
    last = ""
    try:
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=2.0, return_when=FIRST_COMPLETED)
            line = ", ".join(f"{run_id} {_finished(cfg, run_id, instances)}/{len(instances)}" for run_id, cfg in plan)
            if progress and line != last:
                print(f"progress: {line}", file=sys.stderr, flush=True)
                last = line
    except KeyboardInterrupt:
        print("\ninterrupted: finished tasks are kept and tasks in flight have checkpoints; "
              "run the same command again to resume", file=sys.stderr, flush=True)
        os._exit(130)  # the runs' threads cannot be stopped; every write they make is atomic
    pool.shutdown(wait=True)
    summaries = [f.result() for f in futures]
    for summary in summaries:
        print(summary.line(), flush=True)
    return summaries


def _finished(cfg: RunConfig, run_id: str, instances: list[Instance]) -> int:
    records = cfg.runs_dir / run_id / "records"
    done = 0
    for inst in instances:
        rec = read_json(records / f"{inst.instance_id}.json")
        done += bool(isinstance(rec, dict) and rec.get("final"))
    return done


# ---- command line ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m eval.run", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--configs", default="baseline,static,redo",
                   help="comma-separated config names (configs/<name>.toml) or TOML paths")
    p.add_argument("--tasks", default="stratified50", help="manifest name, 'all', or comma-separated ids")
    p.add_argument("--dataset", help=DATASET_HELP)
    p.add_argument("--repos", type=Path, default=None, help="folder of local repository mirrors")
    p.add_argument("--workers", type=int, default=1, help="tasks run at once")
    p.add_argument("--run-prefix", default="cmp", help="run ids are <prefix>-<config> (default cmp)")
    p.add_argument("--runs-dir", type=Path, default=None, help="default: the first config's runs_dir")
    p.add_argument("--modal", action="store_true", help="run the harness on Modal (passes --modal true)")
    p.add_argument("--harness", choices=["official", "local", "none"], default="official",
                   help="official: SWE-bench's harness (Docker, or --modal); local: eval.grade here, without "
                        "Docker (not the official harness); none: only run the configs")
    p.add_argument("--no-harness", action="store_true", help="same as --harness none")
    p.add_argument("--harness-dataset", default=None,
                   help="the dataset the official harness grades against (default: --dataset's hub set, or its path)")
    p.add_argument("--harness-workers", type=int, default=4)
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def fail(message: str) -> int:
    print(f"eval.run: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_dotenv(override=False)
    try:
        names = [n.strip() for n in args.configs.split(",") if n.strip()]
        if not names:
            raise ConfigError("--configs is empty")
        if args.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if args.repos is not None and not args.repos.is_dir():
            raise ConfigError(f"--repos {args.repos} is not a folder")
        cfgs = [load_config(name) for name in names]
        cfgs[0].require_llm()
        seen: dict[str, str] = {}
        for name, cfg in zip(names, cfgs, strict=True):
            if cfg.name in seen:
                raise RunIdError(f"configs {seen[cfg.name]!r} and {name!r} are both named {cfg.name!r}, so they "
                                 f"would share the run id {args.run_prefix}-{cfg.name}; rename one (name = ...)")
            seen[cfg.name] = name
        runs_dir: Path = args.runs_dir or cfgs[0].runs_dir
        instances = select(load_dataset_any(args.dataset, cfgs[0].cache_dir), args.tasks)
        task_ids = [i.instance_id for i in instances]
        plan = []
        for cfg in cfgs:
            run_id = f"{args.run_prefix}-{cfg.name}"
            claim_run_id(runs_dir, run_id, cfg, task_ids)
            plan.append((run_id, cfg.model_copy(update={"predictions_dir": runs_dir / run_id / "predictions",
                                                        "runs_dir": runs_dir})))
    except (ConfigError, DatasetError, RunIdError) as exc:
        return fail(str(exc))

    try:
        summaries = run_configs(plan, instances, repos=args.repos, workers=args.workers,
                                progress=not args.no_progress)
    except WorkspaceError as exc:
        return fail(str(exc))
    scored = [(s.run_id, Path(s.predictions)) for s in summaries]
    if args.no_harness or args.harness == "none":
        return 0
    if args.harness == "local":
        backend = cfgs[0].tests.backend if cfgs[0].tests.backend in ("venv", "local") else "venv"
        failures = score_runs_local(scored, runs_dir, instances, repos=args.repos, cache_dir=cfgs[0].cache_dir,
                                    workers=args.harness_workers, backend=backend, progress=not args.no_progress)
        return 1 if failures else 0
    failures = score_runs(scored, runs_dir, dataset=harness_dataset(args), workers=args.harness_workers,
                          modal=args.modal, engine=False if args.modal else docker_answers())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
