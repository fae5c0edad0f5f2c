"""Services a repository's tests call over the network, served on the test run's own loopback.

A test run has no network, only its own loopback (``fixgraph.sandbox.process``). Where a
repository's tests call a public service at an address they read from an environment variable
(``scoring.execution.envs.LOCAL_SERVICES`` names them: httpbin for psf/requests), the run starts
that service inside its sandbox, on its own ``127.0.0.1``, before the tests, and sets the variable
to it (``serve_local``, with gunicorn): the tests get the answers the harness's containers get
from the internet, and nothing reaches the real network. A run whose tests do not read the
variable (requests 2.10 on) starts nothing.

The service's code and its server are a tool virtualenv per service, built once under
``<cache_dir>/tools`` with fixgraph's own interpreter (always there, and reachable in the sandbox),
in the sandbox as an env's build is (its own network namespace: pip reaches the package index
through fixgraph's index proxy, nothing else), and read only by the runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from fixgraph.records import atomic_write, file_lock
from fixgraph.sandbox import nofollow
from fixgraph.sandbox.process import Limits, run_isolated
from scoring.execution.envs import LOCAL_SERVICES, build_env
from scoring.execution.testenv import LocalService

TOOLS_DIR = "tools"  # under the cache dir, beside the repos' envs
SERVE_SOURCE = Path(__file__).with_name("serve_local.py")
# The server serve_local runs a service's WSGI app with, installed beside it in its tool venv:
# gunicorn, httpbin.org's own (httpbin takes a chunked request body on no other server).
SERVER_PACKAGES = ("gunicorn==27.0.1",)
# Names the tool venv in the run's environment: a venv under a masked folder (a cache in /tmp)
# is bound back into the run only when a variable names it (``fixgraph.sandbox.process._masks``).
SERVICE_VENV_VAR = "FIXGRAPH_SERVICE_VENV"
# Where a repository's tests may read the variable: top-level modules, and the test folders'.
_SEARCHED = ("", "tests", "test")
_MAX_READ = 2_000_000
# A failed build is built again once (the index may have been busy), then final until its folder goes.
BUILD_TRIES = 2


class ServiceError(Exception):
    """A service's tool venv cannot be had; the message is why."""


def declared(repo: str) -> LocalService | None:
    """The service ``repo``'s tests may call (``LOCAL_SERVICES``)."""
    return LOCAL_SERVICES.get(repo)


def wanted(repo: str, work: Path) -> LocalService | None:
    """The service ``repo``'s tests call, when the copy at ``work`` reads its variable."""
    service = declared(repo)
    return service if service is not None and reads(work, service.var) else None


def reads(work: Path, name: str) -> bool:
    """Whether a module at the top of ``work`` or in its test folders names ``name``. The copy is
    the repository's: no link is followed, to a folder or a file."""
    needle = name.encode()
    for folder in _SEARCHED:
        where = work / folder if folder else work
        if where.is_symlink() or not where.is_dir():
            continue
        with os.scandir(where) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".py") and e.is_file(follow_symlinks=False))
        for file in names:
            try:
                if needle in nofollow.read_bytes(work, f"{folder}/{file}" if folder else file, _MAX_READ):
                    return True
            except OSError:
                continue
    return False


def service_key(service: LocalService) -> str:
    """The tool venv's name: the service, what it holds and the interpreter that runs it."""
    digest = hashlib.sha256("\0".join([*packages(service), sys.version]).encode()).hexdigest()[:10]
    return f"{service.name}-{digest}"


def packages(service: LocalService) -> tuple[str, ...]:
    """What ``service``'s tool venv holds: the service and the server that runs it."""
    return (*service.packages, *SERVER_PACKAGES)


def wrapped(python: Path, service: LocalService, argv: list[str]) -> list[str]:
    """``argv`` run by :mod:`serve_local` under the tool venv's ``python``: the service first.
    The wrapper goes as ``-c`` text, so nothing of fixgraph's checkout must be visible in the run."""
    return [str(python), "-I", "-c", SERVE_SOURCE.read_text(), service.var, service.app, service.ready_path,
            "--", *argv]


class ToolEnvs:
    """The services' tool venvs under ``root``, each built once (``tool.json`` records how)."""

    def __init__(self, root: Path, build_timeout_s: float):
        self.root = root.resolve()
        self.build_timeout_s = build_timeout_s

    def venv(self, service: LocalService) -> Path:
        """The built venv of ``service``; :class:`ServiceError` when it cannot be built."""
        path = self.root / service_key(service)
        with file_lock(self.root / f"{path.name}.lock"):
            meta = _read(path / "tool.json")
            if meta is None or (not meta.get("ok") and meta.get("tries", 1) < BUILD_TRIES):
                meta = self._build(service, path, 1 if meta is None else meta.get("tries", 1) + 1)
                atomic_write(path / "tool.json", json.dumps(meta, indent=1))
        if not meta.get("ok"):
            raise ServiceError(f"{service.name}'s tool venv did not build: {meta.get('reason', '?')}")
        if not (path / "venv" / "bin" / "python").exists():
            raise ServiceError(f"{service.name}'s tool venv has no interpreter: delete {path} to rebuild it")
        return path / "venv"

    def _build(self, service: LocalService, path: Path, tries: int) -> dict[str, Any]:
        start = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        (path / "home").mkdir(parents=True)
        venv = path / "venv"
        env = build_env(path / "home", venv)
        limits = Limits(self.build_timeout_s, int(self.build_timeout_s * 2), 8192, index_access=True)
        meta: dict[str, Any] = {"ok": False, "service": service.name, "packages": list(packages(service)),
                                "python": sys.version.split()[0], "tries": tries}
        for what, argv in (("venv", [sys.executable, "-m", "venv", str(venv)]),
                           ("packages", [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                         *packages(service)]),
                           ("freeze", [str(venv / "bin" / "python"), "-m", "pip", "freeze"])):
            done = run_isolated(argv, path, env, limits, writable=(path,))
            if done.returncode != 0:
                tail = [ln for ln in done.output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
                meta.update(reason=f"{what}: {tail[0][:300]}", seconds=round(time.monotonic() - start, 1))
                return meta
            if what == "freeze":
                meta["freeze"] = [ln.strip() for ln in done.output.splitlines() if "==" in ln]
        meta.update(ok=True, seconds=round(time.monotonic() - start, 1))
        return meta


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
