"""Running tasks on Ray: one Ray task per fixgraph task, the driver the run's only writer.

``run_tasks(..., executor=RayExecutor.start(cfg, address))`` sends each task to a Ray worker with
the resources ``[executor]`` asks for. The worker runs the same ``run_task`` as the thread pool,
with a :class:`WorkerStore` that keeps the record and the patch instead of writing them: the
driver writes records, ``.diff`` files and the predictions JSONL, each once and atomically, so two
workers can never write the same file, and a rerun skips finished tasks as before.

Budgets: a :class:`Ledger` actor, pinned to the driver's node, holds the run's one account.
Workers ask it before every LLM call (the run cap) and report every charge to it, which it appends
to the run's ``billed/`` ledger before the reply is used; so a cluster stops at the cap the way one
machine does, over it by at most one call per task in flight.

Checkpoints: each task's LangGraph checkpoints go to the run's SQLite file on the worker's own
disk (``runs_dir``, at the driver's path). A task whose worker died is rerun by Ray
(``executor.max_retries``) and resumes from them when it lands on the same node, which on one
machine is always; on another node it starts over, which costs time but no correctness, since
the ledger already holds what the dead worker spent and nothing else was written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fixgraph.config import ConfigError, RunConfig
from fixgraph.dataset import Instance, Task
from fixgraph.models.llm import ModelFactory, RunMeter
from fixgraph.records import RunStore

if TYPE_CHECKING:
    from pipeline.tasks import GraphFactory  # the runner's side of the seam; executors stand above it

RAY_EXTRA = 'pip install -e ".[ray]"'


class ExecutorError(ConfigError):
    """The executor cannot run: one line for the user (a ConfigError, so every entry point that
    reports bad settings reports this too)."""


def require_ray() -> None:
    """Fail with the extra to install when Ray is missing (checked before any work)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ExecutorError(f"--executor ray needs Ray, which is not installed: {RAY_EXTRA}") from None


def _probe(address: str, timeout: float) -> None:
    """A TCP connect to the cluster's address: Ray itself waits minutes on one that does not answer."""
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host:
        host, port = hostport, ("10001" if address.startswith("ray://") else "6379")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as exc:
        raise ExecutorError(f"cannot reach a Ray cluster at {address}: {exc}") from None


class Ledger:
    """The runs' spending, owned by the driver: one Ray actor on the driver's node per executor.

    Its methods run one at a time, so the ``billed/`` files have one writer and the cap check
    sees every charge made before it. ``run`` keys each run's account (its folder).
    """

    def __init__(self) -> None:
        self.runs: dict[str, tuple[RunStore, float | None, list[float]]] = {}

    def open(self, run: str, run_id: str, predictions_dir: Path, runs_dir: Path, model_name: str,
             cap: float | None, spent: float) -> None:
        self.runs[run] = (RunStore(run_id, predictions_dir, runs_dir, model_name), cap, [spent])

    def charge(self, run: str, instance_id: str, tokens: int, dollars: float) -> None:
        store, _, spent = self.runs[run]
        store.add_billed(instance_id, tokens, dollars)
        spent[0] += dollars

    def billed(self, run: str, instance_id: str) -> dict[str, float]:
        return self.runs[run][0].billed(instance_id)

    def status(self, run: str) -> tuple[float, float | None]:
        _, cap, spent = self.runs[run]
        return spent[0], cap


@dataclass(frozen=True)
class Account:
    """One run's account in the driver's :class:`Ledger`, as a worker holds it."""

    actor: Any
    run: str

    def charge(self, instance_id: str, tokens: int, dollars: float) -> None:
        import ray

        ray.get(self.actor.charge.remote(self.run, instance_id, tokens, dollars))

    def billed(self, instance_id: str) -> dict[str, float]:
        import ray

        return ray.get(self.actor.billed.remote(self.run, instance_id))

    def exhausted(self) -> tuple[bool, float]:
        import ray

        spent, cap = ray.get(self.actor.status.remote(self.run))
        return cap is not None and spent >= cap, spent


class WorkerStore(RunStore):
    """The run's store as a worker sees it: budget through the driver's :class:`Ledger`, and the
    record and patch kept for the driver to write. It writes none of the run's files."""

    def __init__(self, run_id: str, predictions_dir: Path, runs_dir: Path, model_name: str, account: Account):
        # Not RunStore.__init__: that creates the driver's folders, which are not this node's business.
        self.run_id = run_id
        self.predictions_dir = predictions_dir
        self.run_dir = runs_dir / run_id
        self.records_dir = self.run_dir / "records"
        self.model_name = model_name
        self.secrets = []
        self.account = account
        self.record: dict[str, Any] | None = None
        self.patch: str | None = None

    def write_prediction(self, instance_id: str, patch: str) -> None:
        self.patch = patch

    def write_record(self, record: dict[str, Any]) -> None:
        self.record = record

    def add_billed(self, instance_id: str, tokens: int, dollars: float) -> None:
        self.account.charge(instance_id, tokens, dollars)

    def billed(self, instance_id: str) -> dict[str, float]:
        return self.account.billed(instance_id)


class LedgerMeter(RunMeter):
    """The run cap as a worker sees it: the driver's ledger, asked before every call."""

    def __init__(self, account: Account, cap: float | None):
        super().__init__(cap)
        self.account = account

    def add(self, dollars: float) -> None:
        pass  # the ledger counts it when the charge is billed (WorkerStore.add_billed)

    def exhausted(self) -> bool:
        done, self.spent = self.account.exhausted()
        return done


def execute(instance: Instance | Task, cfg: RunConfig, run_id: str, predictions_dir: Path, runs_dir: Path,
            model_name: str, repos: Path | None, account: Account,
            model_factory: ModelFactory | None, build_graph: GraphFactory) -> dict[str, Any]:
    """One task on a Ray worker: the record and the patch, for the driver to write."""
    import ray

    from fixgraph.publish import DiffPublisher
    from fixgraph.repo.workspace import RepoCache
    from pipeline.tasks import run_task

    store = WorkerStore(run_id, predictions_dir, runs_dir, model_name, account)
    # This node's own cache, filled from the mirror (or GitHub) on first use.
    repo_cache = RepoCache(cfg.cache_dir, repos)
    # The graph is built here: a compiled graph does not travel; its factory goes by reference.
    record = run_task(instance, cfg, build_graph=build_graph, publisher=DiffPublisher(store),
                      repo_cache=repo_cache, store=store, model_factory=model_factory, run_meter=LedgerMeter(account, cfg.budget.run_dollars))
    record = store.record or record
    record["worker"] = {"node": ray.util.get_node_ip_address(), "pid": os.getpid()}
    return {"record": record, "patch": store.patch}


def _join(ray: Any, kwargs: dict[str, Any], timeout: float, where: str) -> None:
    """``ray.init`` against a cluster, bounded in time: a port that answers but is no Ray head
    makes it retry for minutes. It runs on a thread that then stays parked for the process's
    life, because Ray ties what it starts to the thread that started it (PR_SET_PDEATHSIG)."""
    outcome: list[BaseException | None] = []
    parked = threading.Event()

    def connect() -> None:
        try:
            ray.init(**kwargs)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        parked.wait()

    threading.Thread(target=connect, daemon=True, name="ray-join").start()
    deadline = time.monotonic() + timeout
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.05)
    if not outcome:
        raise ExecutorError(f"cannot start {where}: no answer within {timeout:g} s (executor.connect_timeout_s)")
    if outcome[0] is not None:
        raise outcome[0]


LOOPBACK = "127.0.0.1"
# Ray turns a loopback node address into the machine's own unless this is off (ray_constants).
_LOCAL_ONLY_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Names of environment variables that hold secrets, besides those whose value is a known secret.
SECRET_VAR = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|SESSION|COOKIE", re.I)


def _loopback_only(ray: Any) -> None:
    """A Ray started here binds loopback only (GCS, raylet, object manager, workers, the runtime
    env agent): with its node address 127.0.0.1, Ray listens on nothing else. Ray imported
    before :meth:`RayExecutor.start` read the switch already; it is set on the module too."""
    from ray._private import ray_constants

    os.environ[_LOCAL_ONLY_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


@contextlib.contextmanager
def _without_secrets() -> Iterator[None]:
    """``os.environ`` without any secret while Ray starts its processes, then as it was."""
    from fixgraph import redaction

    known = set(redaction.known())
    # Ray's own settings stay (RAY_AUTH_TOKEN is Ray's to hold, when the operator turns it on).
    dropped = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and (SECRET_VAR.search(k) or v in known)}
    for key in dropped:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(dropped)


def _absolute(cfg: RunConfig) -> RunConfig:
    # Workers do not share the driver's working directory on a cluster; paths mean the same everywhere.
    return cfg.model_copy(update={"cache_dir": cfg.cache_dir.resolve(), "runs_dir": cfg.runs_dir.resolve(),
                                  "predictions_dir": cfg.predictions_dir.resolve()})


class RayExecutor:
    """Tasks as Ray tasks on a local Ray (started here) or a cluster (joined at ``address``)."""

    def __init__(self, ray: Any, owned: bool, max_in_flight: int | None):
        self.ray = ray
        self.owned = owned
        self.max_in_flight = max_in_flight
        # One ledger actor for the executor's life: starting an actor costs a worker process.
        self.ledger: Any = None

    @classmethod
    def start(cls, cfg: RunConfig, address: str | None = None, max_in_flight: int | None = None) -> RayExecutor:
        """Join the cluster at ``address``, or start Ray on this machine; reuse a Ray already
        initialised in this process (a test session, a notebook) and leave it running."""
        if not address:
            # Read when Ray is imported: a local Ray's node address is loopback, not this machine's.
            os.environ.setdefault(_LOCAL_ONLY_VAR, "0")
        require_ray()
        import ray

        if ray.is_initialized():
            return cls(ray, owned=False, max_in_flight=max_in_flight)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network here, and none needed
        settings = cfg.executor
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR,
                                  "log_to_driver": False}
        if address:
            _probe(address, min(3.0, settings.connect_timeout_s))
            kwargs["address"] = address
        else:
            _loopback_only(ray)
            kwargs.update(address="local", num_cpus=settings.local_cpus or os.cpu_count() or 1,
                          _node_ip_address=LOOPBACK)
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        try:
            if address:
                _join(ray, kwargs, settings.connect_timeout_s, where)
            else:
                # Ray's processes (GCS, raylet, and every worker the raylet starts) inherit this
                # environment: they get none of the driver's secrets. A task gets what it needs
                # (the LLM key, the token) in its payload, the run's config.
                with _without_secrets():
                    ray.init(**kwargs)
        except ExecutorError:
            raise
        except Exception as exc:  # Ray raises many kinds; each ends the run with its one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ExecutorError(f"cannot start {where}: {first}") from None
        return cls(ray, owned=True, max_in_flight=max_in_flight)

    def close(self) -> None:
        if self.ledger is not None and self.ray.is_initialized():
            with contextlib.suppress(Exception):
                self.ray.kill(self.ledger)
        self.ledger = None
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()

    def _slots(self, cfg: RunConfig) -> int:
        """Tasks in flight at once: what the cluster's CPUs fit, capped by --workers when given.
        Submitting only that many keeps the run cap's overshoot bounded, as on one machine."""
        cpus = float(self.ray.cluster_resources().get("CPU", 1.0))
        fit = max(1, int(cpus // cfg.executor.cpus))
        return min(fit, self.max_in_flight) if self.max_in_flight else fit

    def run(self, todo: list[Instance | Task], cfg: RunConfig, *, build_graph: GraphFactory, store: RunStore,
            repos: Path | None, model_factory: ModelFactory | None, run_meter: RunMeter,
            on_record: Callable[[dict[str, Any]], None]) -> list[Instance | Task]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not todo:
            return []
        ray = self.ray
        cfg = _absolute(cfg)
        repos = repos.resolve() if repos else None
        if self.ledger is None:
            pinned = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self.ledger = ray.remote(Ledger).options(num_cpus=0, scheduling_strategy=pinned).remote()
        account = Account(self.ledger, str(store.run_dir.resolve()))
        ray.get(self.ledger.open.remote(account.run, store.run_id, store.predictions_dir.resolve(),
                                        store.run_dir.parent.resolve(), store.model_name, run_meter.cap,
                                        run_meter.spent))
        remote = ray.remote(execute)
        slots = self._slots(cfg)
        queue = list(todo)
        in_flight: dict[Any, tuple[Instance | Task, float, str]] = {}

        try:
            while queue or in_flight:
                while queue and len(in_flight) < slots and not account.exhausted()[0]:
                    inst = queue.pop(0)
                    res = cfg.executor.resources(inst.repo)
                    options: dict[str, Any] = {"num_cpus": res.cpus, "max_retries": cfg.executor.max_retries,
                                               "retry_exceptions": False, "name": f"fixgraph:{inst.instance_id}"}
                    if res.memory_mb:
                        options["memory"] = res.memory_mb * 1024 * 1024
                    ref = remote.options(**options).remote(
                        inst, cfg, store.run_id, store.predictions_dir.resolve(), store.run_dir.parent.resolve(),
                        store.model_name, repos, account, model_factory, build_graph)
                    in_flight[ref] = (inst, time.monotonic(), _now())
                if not in_flight:
                    break
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
                for ref in ready:
                    inst, t0, started = in_flight.pop(ref)
                    record = self._collect(ref, inst, cfg, store, t0, started)
                    if record is not None:
                        on_record(record)
        except KeyboardInterrupt:
            # The driver is going: stop the workers' tasks too (their checkpoints stay for the rerun).
            for ref in in_flight:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            self.close()
            raise
        return queue

    def _collect(self, ref: Any, inst: Instance | Task, cfg: RunConfig, store: RunStore, t0: float,
                 started: str) -> dict[str, Any] | None:
        """Write one finished task: its patch, then its record (the order the thread pool keeps)."""
        from ray import exceptions as rx

        from pipeline.tasks import build_record, split

        try:
            result = self.ray.get(ref)
        except (rx.WorkerCrashedError, rx.OutOfMemoryError, rx.NodeDiedError) as exc:
            # Ray reran it max_retries times and the worker died each time: a failed task, final.
            record = build_record(split(inst, cfg)[0], cfg, {}, seconds=time.monotonic() - t0, started=started,
                                  failed=f"its Ray worker died on each of {cfg.executor.max_retries + 1} "
                                         f"tries ({type(exc).__name__})",
                                  dataset=inst.dataset if isinstance(inst, Instance) else "")
            record["billed"] = store.billed(inst.instance_id)
            store.write_record(record)
            return record
        except rx.RayError as exc:
            # The cluster lost the task (not the task's fault): no record, so a rerun runs it again.
            print(f"fixgraph: {inst.instance_id}: lost by Ray ({type(exc).__name__}); "
                  "run the same command again to run it", file=sys.stderr, flush=True)
            return None
        if result["patch"] is not None:
            store.write_prediction(inst.instance_id, result["patch"])
        store.write_record(result["record"])
        return result["record"]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
