"""Shared fixtures: a fixture repo with a real bug, a config pointed at temp dirs."""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.repos import make_calc_repo
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance
from fixgraph.models.transport import close_clients

TEST_KEY = "sk-test-0123456789abcdef"

# Past pytest-timeout's 300 s (pyproject.toml): a test stuck in C code that holds the GIL (a regex
# that backtracks without end, say) never lets the timeout's thread run. faulthandler's watchdog is
# a C thread: it dumps every thread's stack and ends the worker, which xdist reports and replaces,
# instead of the whole run waiting on it until CI's limit.
HARD_LIMIT_S = float(os.environ.get("FIXGRAPH_TEST_HARD_LIMIT_S", "420"))
_stderr_fd: list[int] = []  # a copy of the process's stderr taken before any test captures fd 2
_started: dict[str, tuple[float, str]] = {}
_seconds_by_file: dict[str, float] = defaultdict(float)


def pytest_configure(config: pytest.Config) -> None:
    _stderr_fd.append(os.dup(sys.__stderr__.fileno() if sys.__stderr__ is not None else 2))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 - a hook wrapper
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True, file=_stderr_fd[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _started[nodeid] = (time.monotonic(), "")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds_by_file[report.nodeid.split("::", 1)[0]] += report.duration
    gateway = getattr(getattr(report, "node", None), "gateway", None)  # xdist's controller: the worker's
    if report.when == "setup" and report.nodeid in _started and gateway is not None:
        _started[report.nodeid] = (_started[report.nodeid][0], gateway.id)
    elif report.when not in ("setup", "call"):  # its teardown, or xdist's report of a crashed worker
        _started.pop(report.nodeid, None)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Where a run's time went: the files that took longest, and a test still running when the run
    ended (CI's whole-run limit, ^C) named with how long it had run, so an overrun says its cause."""
    write = terminalreporter.write_line
    if _seconds_by_file:
        terminalreporter.section("seconds by test file (setup, call and teardown; the 12 longest)")
        for name, seconds in sorted(_seconds_by_file.items(), key=lambda kv: -kv[1])[:12]:
            write(f"{seconds:8.1f}s {name}")
    if _started:
        terminalreporter.section("still running when the run ended")
        now = time.monotonic()
        for nodeid, (t0, worker) in sorted(_started.items(), key=lambda kv: kv[1][0]):
            write(f"{now - t0:8.1f}s {nodeid} {worker}".rstrip())


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test costs are measured as on an idle machine: the load of whatever else runs beside the
    suite must not change which files a selection prices out."""
    monkeypatch.setattr("scoring.execution.testenv.slowdown", lambda: 1.0)


@pytest.fixture(autouse=True)
def fresh_http_pool() -> Iterator[None]:
    """Each test's LLM calls start on a new connection pool: the loopback servers of earlier tests
    are gone, and a connection kept to one of their ports must not meet this test's server."""
    yield
    close_clients()


@pytest.fixture
def calc(tmp_path: Path) -> tuple[Path, Instance]:
    """(mirrors dir, instance) for the calc fixture: mean() is off by one."""
    mirrors = tmp_path / "mirrors"
    raw = make_calc_repo(mirrors)
    return mirrors, Instance.model_validate(raw)


def make_config(tmp_path: Path, name: str = "redo", **overrides: Any) -> RunConfig:
    base = {
        "cache_dir": str(tmp_path / "cache"),
        "predictions_dir": str(tmp_path / "predictions"),
        "runs_dir": str(tmp_path / "runs"),
        "tests.backend": "local",
    }
    base.update(overrides)
    return load_config(name, env={"OPENAI_API_KEY": TEST_KEY}, overrides=base)


@pytest.fixture
def cfg_factory(tmp_path: Path):
    def make(name: str = "redo", **overrides: Any) -> RunConfig:
        return make_config(tmp_path, name, **overrides)

    return make


def read_record(cfg: RunConfig, run_id: str, instance_id: str) -> dict[str, Any]:
    return json.loads((cfg.runs_dir / run_id / "records" / f"{instance_id}.json").read_text())


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, str]]]:
    """Every subprocess started during the test: (argv, environment it got)."""
    seen: list[tuple[Any, dict[str, str]]] = []
    real_init = subprocess.Popen.__init__

    def spy(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
        seen.append((args, dict(kw.get("env") or os.environ)))
        real_init(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    return seen
