"""Running tasks: one graph invocation per task, checkpointed, recorded, resumable.

A task is done when its final record exists; a rerun skips it. A task in flight when the run
died restarts from its last LangGraph checkpoint (SQLite, thread id = instance id).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import sqlite3
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import GraphRecursionError

from agents.context import TaskContext
from fixgraph import astlock, phases, redaction
from fixgraph.config import ConfigError, RunConfig
from fixgraph.dataset import EvaluationData, Instance, Task
from fixgraph.models.llm import (
    LLM,
    CallEvent,
    ChargeHook,
    EventHook,
    Meter,
    ModelFactory,
    RunMeter,
    default_factory,
)
from fixgraph.models.transport import CallPolicy
from fixgraph.publish import DiffPublisher, Publisher
from fixgraph.records import RunLock, RunStore, open_wal
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree
from fixgraph.sandbox import process as sandbox
from fixgraph.state import TaskState, Usage
from pipeline.screen import Activity, Screen


class GraphFactory(Protocol):
    """What the runner is given to build the graph (graph.build_graph): the runner never imports
    the module that wires the agents, which stands above it."""

    def __call__(self, checkpointer: Any = None) -> Any: ...


class Executor(Protocol):
    """Where tasks run when not on the runner's own thread pool (pipeline/executors.py implements
    it for Ray; the runner defines the seam and imports no executor)."""

    def run(self, todo: list[Instance | Task], cfg: RunConfig, *, build_graph: GraphFactory, store: RunStore,
            repos: Path | None, model_factory: ModelFactory | None, run_meter: RunMeter,
            on_record: Callable[[dict[str, Any]], None]) -> list[Instance | Task]:
        """Run ``todo``, write each record through ``store``, call ``on_record`` after each;
        return the tasks not started because the run's budget was spent."""
        ...


# How the failures that come from the endpoint or the machine, not from the task, begin
# (fixgraph/models/llm.py's LLMFailure lines, the workspace's clone failure).
INFRASTRUCTURE_FAULTS = ("cannot reach the LLM server", "LLM server answered", "LLM server timed out",
                         "LLM server sent no readable reply", "cannot clone")


def model_name(cfg: RunConfig) -> str:
    return f"fixgraph-{cfg.label}-{cfg.llm.models.coder}"


def split(item: Instance | Task, cfg: RunConfig) -> tuple[Task, EvaluationData | None]:
    """Where a dataset row enters the pipeline: the task crosses into the graph; the evaluation
    data stays out, except under the ``oracle-tests`` ablation, where it goes to the Critic alone."""
    if isinstance(item, Task):
        return item, None
    return item.task(hints=cfg.hints_text), (item.evaluation_data() if cfg.oracle else None)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _status(values: dict[str, Any], failed: str) -> str:
    if (values.get("published") or {}).get("kind") not in (None, "none"):
        return "patched"
    return "failed" if failed else "empty"


def build_record(task: Task, cfg: RunConfig, values: dict[str, Any], *, seconds: float,
                 started: str, failed: str = "", resumed: bool = False, dataset: str = "") -> dict[str, Any]:
    attempts = values.get("attempts", [])
    published = values.get("published") or {}
    chosen = next((a for a in attempts if a.get("number") == published.get("attempt")), None)
    failed = failed or values.get("failed", "")
    stop = values.get("stop_reason") or (f"failed: {failed}" if failed else "done")
    return {
        "instance_id": task.instance_id,
        "repo": task.repo,
        "dataset": dataset,
        "config": cfg.label,
        "tests_source": "oracle" if cfg.oracle else ("own" if cfg.critic.enabled and cfg.critic.tests == "own" else "none"),
        "model_name_or_path": model_name(cfg),
        "final": not stop.startswith("budget: run"),
        "status": _status(values, failed),
        "stop_reason": stop,
        "failed": failed,
        "verdict": (chosen or {}).get("verdict") or values.get("verdict", ""),
        "fix_score": (chosen or {}).get("score") or {"kind": "none"},
        "attempts": attempts,
        "n_attempts": len(attempts),
        "critic_flagged": any(a.get("verdict") == "Unsafe" for a in attempts),
        "plan": values.get("plan", {}),
        "planner_runs": values.get("planner_runs", 0),
        "explorer_runs": values.get("explorer_runs", 0),
        "reruns": values.get("reruns", []),
        "files_read": values.get("files_read", []),
        "exploration": values.get("exploration", {}),
        "repro": values.get("repro", {}),
        "usage": values.get("usage", {}),
        "published": published,
        "diff_path": published.get("diff_path", ""),
        "seconds": round(seconds, 3),
        "started_at": started,
        "finished_at": _now(),
        "resumed": resumed,
    }


class _Saver(SqliteSaver):
    """LangGraph's SQLite checkpointer, its writes timed as the phase "checkpoints"."""

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        with phases.phase("checkpoints"):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        with phases.phase("checkpoints"):
            super().put_writes(config, writes, task_id, task_path)


def _checkpointer(path: Path | None) -> SqliteSaver | None:
    if path is None:
        return None
    savers: list[SqliteSaver] = []

    def setup(db: sqlite3.Connection) -> None:
        savers.append(_Saver(db))
        savers[0].setup()  # under open_wal's lock: the tables are created by one opener at a time

    open_wal(path, setup, check_same_thread=False)
    return savers[0]


def _both(screen: EventHook, task: str, other: Callable[[str, CallEvent], None] | None) -> EventHook:
    if other is None:
        return screen
    return lambda ev: (screen(ev), other(task, ev))[0]


def check_checkpoints(path: Path) -> None:
    """Open (and set up) the run's checkpoint database once before any task, so that a file that
    is not a database, or a folder that cannot be written, stops the run with the reason instead
    of failing every task."""
    try:
        saver = _checkpointer(path)
    except (sqlite3.Error, OSError) as exc:
        raise WorkspaceError(f"checkpoint database {path} cannot be used: {exc}") from None
    if saver is not None:
        saver.conn.close()


def run_task(item: Instance | Task, cfg: RunConfig, *, build_graph: GraphFactory, publisher: Publisher,
             repo_cache: RepoCache, store: RunStore | None = None, model_factory: ModelFactory | None = None,
             run_meter: RunMeter | None = None, on_event: EventHook | None = None,
             initial: TaskState | None = None) -> dict[str, Any]:
    """Run the graph on one task and return its record (also written to ``store`` when given).

    ``initial``: state the run starts with besides the task (the bot's revision of its own PR
    keeps the first round's reproduction test this way)."""
    instance, oracle = split(item, cfg)
    for folder in (cfg.cache_dir, cfg.runs_dir, cfg.predictions_dir):
        sandbox.cover(folder)  # no test of this task sees fixgraph's own folders
    started, t0 = _now(), time.monotonic()
    key = f"{store.run_id}__{instance.instance_id}" if store else f"adhoc__{instance.instance_id}"
    wt: Worktree | None = None
    saver = _checkpointer(store.checkpoint_path if store else None)
    thread: RunnableConfig = {"configurable": {"thread_id": instance.instance_id},
                              "recursion_limit": cfg.recursion_limit}
    values: dict[str, Any] = {}
    failed = ""
    resumed = False
    try:
        wt = repo_cache.worktree(instance.repo, instance.base_commit, key)
        graph = build_graph(saver)
        snapshot = graph.get_state(thread) if saver else None
        resumed = bool(snapshot and snapshot.values and snapshot.next)
        start = snapshot.values.get("usage") if snapshot and resumed else None
        on_charge: ChargeHook | None = None
        if store is not None:
            # The ledger counts calls a killed process made after its last checkpoint, so a resumed
            # task's budget starts from what was really spent.
            billed = store.billed(instance.instance_id)
            if billed["calls"]:
                start = Usage(input_tokens=int(billed["tokens"]), dollars=billed["dollars"])
            on_charge = functools.partial(store.add_billed, instance.instance_id)
        meter = Meter(cfg.budget, cfg.llm.prices, run_meter, start=start, on_charge=on_charge)
        ctx = TaskContext(cfg=cfg, task=instance, oracle=oracle, worktree=wt,
                          llm=LLM(model_factory or default_factory(cfg), meter, cfg.llm.structured_reasks,
                                  policy=CallPolicy.of(cfg.llm), node_caps=cfg.llm.node_output_tokens,
                                  on_event=on_event),
                          publisher=publisher, cache_dir=cfg.cache_dir.resolve())
        start_state: TaskState | None = None
        if not resumed:
            start_state = TaskState(**(initial or {}))
            start_state.update(instance_id=instance.instance_id, problem=instance.issue)
        # "sync": a node's checkpoint is on disk before the next node starts. LangGraph's default
        # writes it in the background, so a worker SIGKILLed early in a node could lose the last
        # one and its task start over (seen under a load of 15: a killed task rerun without resuming).
        values = graph.invoke(start_state, thread, context=ctx, durability="sync")
    except GraphRecursionError:
        failed = f"recursion limit {cfg.recursion_limit} reached"
    except (WorkspaceError, PatchError) as exc:
        failed = str(exc)
    except Exception as exc:  # a bug in one task must not end the run; the record keeps the trace
        failed = f"internal error: {type(exc).__name__}: {exc}"
        values = {**values, "traceback": traceback.format_exc(limit=8)}
    if failed and saver is not None:
        with contextlib.suppress(Exception):
            saved = saver.get_tuple(thread)
            values = {**(saved.checkpoint["channel_values"] if saved else {}), **values}
    record = build_record(instance, cfg, values, seconds=time.monotonic() - t0, started=started,
                          failed=failed, resumed=resumed, dataset=item.dataset if isinstance(item, Instance) else "")
    if "traceback" in values:
        record["traceback"] = values["traceback"]
    if store is not None:
        with phases.phase("records"):
            record["billed"] = store.billed(instance.instance_id)
            store.write_record(record)
    if saver is not None:
        with contextlib.suppress(Exception), phases.phase("checkpoints"):
            saver.delete_thread(instance.instance_id)
        saver.conn.close()
    if wt is not None:
        with contextlib.suppress(Exception):
            repo_cache.remove_worktree(instance.repo, wt)
    return record


@dataclass
class RunSummary:
    run_id: str
    total: int = 0
    skipped: int = 0
    finished: int = 0
    patched: int = 0
    failed: int = 0
    empty: int = 0  # ended with no patch and no failure (a budget spent, nothing that applied)
    timeouts: int = 0  # LLM calls that timed out, over the tasks run now
    scores: list[float] = field(default_factory=list)
    tokens: int = 0
    dollars: float = 0.0
    interrupted: bool = False
    predictions: str = ""
    failures: list[str] = field(default_factory=list)  # the ``failed`` line of each failed task
    halted: str = ""  # why no further task was started (the endpoint gone), when so

    @property
    def mean_fix_score(self) -> float | None:
        return statistics.fmean(self.scores) if self.scores else None

    def add(self, record: dict[str, Any]) -> None:
        self.finished += 1
        self.patched += record.get("status") == "patched"
        self.failed += record.get("status") == "failed"
        self.empty += record.get("status") == "empty"
        if record.get("status") == "failed":
            self.failures.append(str(record.get("failed") or ""))
        self.timeouts += int((record.get("usage") or {}).get("timeouts", 0))
        score = (record.get("fix_score") or {}).get("fix_score")
        if score is not None:
            self.scores.append(float(score))
        usage = record.get("usage") or {}
        self.tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        self.dollars += float(usage.get("dollars", 0.0))

    def line(self) -> str:
        mean = f"{self.mean_fix_score:.3f}" if self.mean_fix_score is not None else "n/a"
        timeouts = f"; {self.timeouts} LLM calls timed out (llm.timeout_s / FIXGRAPH_LLM_TIMEOUT)" if self.timeouts else ""
        return (f"run {self.run_id}: {self.total} tasks, {self.skipped} already done, {self.finished} run now "
                f"({self.patched} patched, {self.empty} empty, {self.failed} failed); mean fix_score (internal) "
                f"{mean}; {self.tokens} tokens, ${self.dollars:.4f}{timeouts}")

    def common_fault(self) -> str:
        """The one fault of the machine or the endpoint that failed every task run now ("" when
        any task ended otherwise): such a batch says nothing about the tasks, so it exits non-zero."""
        if not self.finished or len(self.failures) != self.finished:
            return ""
        kinds = {f.split(":")[0] for f in self.failures}
        kind = kinds.pop() if len(kinds) == 1 else ""
        # A 400, 413 or 422 refuses that one request (a prompt over the context window), not the run.
        if kind.removeprefix("LLM server answered ") in ("400", "413", "422"):
            return ""
        return kind if kind.startswith(INFRASTRUCTURE_FAULTS) else ""

    def predictions_line(self) -> str:
        """Where the predictions are, when a file was written; else that none was."""
        if self.predictions and Path(self.predictions).is_file():
            return f"predictions: {self.predictions}"
        return "predictions: none written (no task produced a patch)"


def run_tasks(instances: list[Instance] | list[Task], cfg: RunConfig, *, build_graph: GraphFactory,
              run_id: str, repos: Path | None, workers: int = 1, model_factory: ModelFactory | None = None,
              progress: bool = True, publisher: Publisher | None = None,
              executor: Executor | None = None, event_lines: bool = False,
              on_call: Callable[[str, CallEvent], None] | None = None,
              endpoint_check: Callable[[], None] | None = None) -> RunSummary:
    """Run every task not already done; Ctrl-C keeps what finished and exits for a later resume.

    Tasks run on a thread pool of ``workers``, or on ``executor`` (pipeline/executors.py) when given.
    ``progress``: the bar and the tasks in flight (pipeline/screen.py); ``event_lines``: one
    line per event on stderr instead (``--no-progress``); ``on_call``: told of every LLM call
    event with its task's id (eval/local_model_smoke.py times the calls); ``endpoint_check``:
    asked again after a task could not reach the LLM server: when it raises ConfigError, no other
    task starts (on the thread pool) and ``summary.halted`` says why.
    """
    # Workers are threads, and ast.parse is not thread-safe on CPython 3.11 (see fixgraph/astlock.py).
    astlock.install()
    # Test output reaches records, checkpoints and prompts; the config's secrets are masked there.
    redaction.register(cfg.secrets())
    store = RunStore(run_id, cfg.predictions_dir, cfg.runs_dir, model_name(cfg), cfg.secrets())
    lock = RunLock(store.run_dir)  # a second process with this run id stops here
    try:
        return _run_locked(instances, cfg, store, build_graph=build_graph, repos=repos, workers=workers,
                           model_factory=model_factory, progress=progress, publisher=publisher, executor=executor,
                           event_lines=event_lines, on_call=on_call, endpoint_check=endpoint_check)
    finally:
        lock.release()


def _run_locked(instances: list[Instance] | list[Task], cfg: RunConfig, store: RunStore, *,
                build_graph: GraphFactory, repos: Path | None, workers: int, model_factory: ModelFactory | None,
                progress: bool, publisher: Publisher | None, executor: Executor | None,
                event_lines: bool = False, on_call: Callable[[str, CallEvent], None] | None = None,
                endpoint_check: Callable[[], None] | None = None) -> RunSummary:
    run_id = store.run_id
    repo_cache = RepoCache(cfg.cache_dir, repos)
    publisher = publisher or DiffPublisher(store)
    summary = RunSummary(run_id=run_id, total=len(instances), predictions=str(store.jsonl_path))
    todo = [i for i in instances if not store.is_done(i.instance_id)]
    if todo:
        check_checkpoints(store.checkpoint_path)
    summary.skipped = len(instances) - len(todo)
    # A run killed between a task's record and its clean-up leaves that worktree behind.
    repo_cache.remove_stale_worktrees(
        f"{run_id}__", keep={f"{run_id}__{i.instance_id}".replace("/", "_") for i in todo})
    spent = max(sum(float((r.get("usage") or {}).get("dollars", 0.0)) for r in store.records()),
                store.billed_dollars())
    run_meter = RunMeter(cfg.budget.run_dollars, spent)
    activity = Activity(lines=event_lines)
    bar = Screen(len(instances), summary.skipped, enabled=progress, activity=activity)
    lock = threading.Lock()

    def finished(record: dict[str, Any]) -> None:
        with lock:
            summary.add(record)
            bar.update(summary.finished, summary.mean_fix_score, summary.tokens, summary.dollars)
        if endpoint_check is not None and str(record.get("failed", "")).startswith("cannot reach the LLM server"):
            # The endpoint went away mid-run: every task left would index its repository and
            # retry before failing the same way.
            try:
                endpoint_check()
            except ConfigError as exc:
                summary.halted = summary.halted or str(exc)

    def one(inst: Instance | Task) -> dict[str, Any]:
        activity.started(inst.instance_id)
        record = run_task(inst, cfg, build_graph=build_graph, publisher=publisher, repo_cache=repo_cache,
                          store=store, model_factory=model_factory, run_meter=run_meter,
                          on_event=_both(activity.hook(inst.instance_id), inst.instance_id, on_call))
        activity.finished(inst.instance_id, record)
        finished(record)
        return record

    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="task")
    pending: set[Future[dict[str, Any]]] = set()
    queue = list(todo)
    try:
        with bar:
            if executor is not None:
                queue = executor.run(todo, cfg, build_graph=build_graph, store=store, repos=repos,
                                     model_factory=model_factory,
                                     run_meter=run_meter, on_record=finished)
            while executor is None and (queue or pending):
                while queue and len(pending) < workers and not run_meter.exhausted() and not summary.halted:
                    pending.add(pool.submit(one, queue.pop(0)))
                if not pending:
                    break
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in done:
                    fut.result()
    except KeyboardInterrupt:
        summary.interrupted = True
        pool.shutdown(wait=False, cancel_futures=True)
        print(f"\ninterrupted: {summary.finished} tasks finished this run and are kept; "
              "run the same command again to resume", file=sys.stderr)
        sys.stderr.flush()
        # Tasks in flight have checkpoints and every write is atomic, so leaving now loses nothing.
        os._exit(130)
    pool.shutdown(wait=True)
    if queue and not summary.halted:
        print(f"run budget of ${cfg.budget.run_dollars} spent: {len(queue)} tasks not started", file=sys.stderr)
    return summary
