"""What every test backend shares: what a run executes (:class:`Suite`), what it reports
(:class:`SuiteRun`), where it runs (:class:`TestEnv`) and the working copy it runs in.

This module is the floor of the test-running layer: the backends (``scoring.execution.outcomes``' subprocess
runner, ``scoring.execution.envs``' virtualenvs, ``scoring.execution.docker``) build on it and not on each other.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fixgraph import phases
from fixgraph.dataset import Task
from fixgraph.repo import gitsafe
from fixgraph.repo.workspace import Worktree
from scoring.execution import django_layout

PASSING = ("PASSED", "XFAIL")  # swebench's grading counts an expected failure as a pass
LOG_TAIL_CHARS = 3000


@dataclass(frozen=True)
class Suite:
    """What one test run executes, on a fresh copy of the base commit plus the candidate patch.

    - ``targets``: test files (repository-relative) handed to the repository's test command;
    - ``added``: files written after the patch, (path, content) pairs: the reproduction tests;
    - ``protected``: test files put back to the base commit's content after the patch, so that a
      patch cannot make a test pass by editing it;
    - ``extra_patch``: a diff applied last (only the ``oracle-tests`` ablation has one: the
      instance's ``test_patch``);
    - ``timeout_s``: the run's wall-clock cap (None: the backend's);
    - ``finished_on_timeout``: a run killed by its timeout reports the tests pytest saw finish (the
      crash plugin writes each outcome as it comes). Only the regression check asks: the harness
      reads pytest's summary, which a killed run never prints, and a reproduction test that hangs
      is no test;
    - ``trace``: repository-relative files whose executed lines the run records
      (``scoring.runtime.lines``; honoured on patched runs of the local backends only);
    - ``own``: a run of fixgraph's own checks (the regression tests, a reproduction test), whose
      base and patched runs are compared with each other: the test command leaves out what the
      harness passes only for its recorded lists' sake (``scoring.execution.specs.HARNESS_ONLY_FLAGS``:
      sympy's ``-C``, its cache off). A run of the instance's own tests (grading) keeps them.
    """

    targets: tuple[str, ...]
    added: tuple[tuple[str, str], ...] = ()
    protected: tuple[str, ...] = ()
    extra_patch: str = ""
    timeout_s: float | None = None
    label: str = ""
    finished_on_timeout: bool = False
    trace: tuple[str, ...] = ()
    own: bool = False

    def key_parts(self) -> list[str]:
        """What identifies the suite's outcome at a given commit (for caching a base run)."""
        return [self.label, "\0".join(self.targets), "\0".join(p + "\0" + c for p, c in self.added),
                "\0".join(self.protected), self.extra_patch, *(["own"] if self.own else [])]


@dataclass
class SuiteRun:
    """What one run of a :class:`Suite` reported."""

    statuses: dict[str, str]  # test id -> PASSED | FAILED | ERROR | SKIPPED | XFAIL
    log: str
    seconds: float
    timed_out: bool = False
    network_isolated: bool = False
    # Set when the run could not happen at all (no environment, the patch does not apply, ...).
    error: str = ""
    crash_records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    root: str = ""  # where the working copy was, to read paths in the log
    backend: str = ""
    # The limit the run had, and how many times slower than an idle machine it ran (the mean of
    # :func:`slowdown` at its start and end): what a cost measured on it is worth on an idle one.
    timeout_s: float = 0.0
    slowdown: float = 1.0
    # The lines of the suite's ``trace`` files the run executed (scoring.runtime.lines.Lines), or None.
    lines: Any = None
    env: str = ""  # how the run's environment was made, one line (env_made)

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        """The end of the log, with the run's temporary working copy written as ``.``: what a
        record keeps and a prompt shows says nothing of this machine's paths."""
        text = self.log[-chars - 500:]
        if self.root:
            text = text.replace(self.root + "/", "").replace(self.root, ".")
        return text[-chars:]


def env_made(task: Task, spec: dict[str, Any] | None) -> str:
    """How a run's environment was made, one line for records and PR bodies: inferred from which
    of the repository's files (or its committed fixgraph table), or swebench's spec."""
    if spec is None:
        return ""
    if spec.get("inferred"):
        parts = [ln for ln in str(spec.get("description", "")).splitlines() if not ln.startswith("env key")]
        return "inferred from the repository: " + "; ".join(parts)
    return f"swebench's install spec for {task.repo} {task.version}"


def slowdown() -> float:
    """How many times slower than on an idle machine a test process runs now: the runnable
    processes per core (the 1-minute load average), at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def slowdown_over(at_start: float) -> float:
    """A run's slowdown: the mean of :func:`slowdown` at its start (``at_start``) and now, its end."""
    return (at_start + slowdown()) / 2


def suite_timeout(suite: Suite, cap: float, slowed: float) -> float:
    """The seconds a run of ``suite`` may take. A suite's own timeout is an idle machine's: on a
    busy one the same tests take longer, and it stretches by ``slowed`` (else a run cut at 300 s
    says nothing of the tests), never past the backend's ``cap``."""
    return min(suite.timeout_s * slowed, cap) if suite.timeout_s else cap


def owned_by(test_id: str, files: tuple[str, ...] | list[str], names: set[str] | None = None) -> bool:
    """Whether a parsed test id is one of ``files``' own tests. A test of pytest itself prints the
    results of the inner sessions it starts, and the log parser reads those too
    (``test_x.py::test_func`` of a temporary directory): they are nobody's tests. An id with a path
    must name one of the files; a bare name (sympy's runner) must be one ``names`` lists when
    given. django's ``test_x (app.test_y.Class)`` (``...Class.test_x`` from Python 3.11) is owned
    by the file of its module, ``tests/app/test_y.py``, when that is one of ``files``: its
    ``unittest.loader._FailedTest`` (a label that cannot be imported) is nobody's, nor the bare
    ``test_x`` the parser reads off django's ``ERROR:``/``FAIL:`` lines."""
    if "::" in test_id:
        return test_id.split("::", 1)[0] in files
    if any(f.startswith("tests/") for f in files):
        if django_layout.owner_label(test_id) and django_layout.owning_file(test_id, files) is None:
            return False
        if not django_layout.owner_label(test_id) and names is not None and django_layout.is_summary_name(test_id):
            # swebench's django parser also reads ``ERROR: test_x (...)`` as a bare ``test_x``: the
            # full id is the test's; the bare one would never pass (no such line when it does).
            return False
    if names is None:
        return True
    word = test_id.split(" ", 1)[0].split("[", 1)[0]
    return word in names


def listed_head(full: str) -> str:
    """A full test id as SWE-bench's old parser listed it: cut at its first space."""
    return full.split(maxsplit=1)[0] if full.strip() else full


class SuiteRunner(Protocol):
    """A test backend: runs a suite on the task's base commit with (or without) a patch."""

    backend: str
    cache_dir: Path

    def run_suite(self, task: Task, wt: Worktree, patch: str | None, suite: Suite) -> SuiteRun: ...

    def env_key(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> str:
        """Identifies the environment runs happen in (for caching), "" when none can be had; ``files``
        as :class:`EnvProvider` takes them."""
        ...


class EnvError(Exception):
    """The test environment for a task cannot be built; the message is the reason."""


@dataclass
class TestEnv:
    """Where and how a task's tests run: interpreter, PATH additions, setup leftovers."""

    python: str
    spec: dict[str, Any] | None
    path_prefix: list[str] = field(default_factory=list)
    # Files the install step generated (compiled extensions, _version.py, egg-info), to copy
    # into a fresh working copy where missing: relative path -> absolute source path.
    artifacts_root: Path | None = None
    artifacts: list[str] = field(default_factory=list)
    key: str = "local"
    extra_env: dict[str, str] = field(default_factory=dict)
    # Said in every run's notes, and so in the task's record: the env's Python is a measured-safe
    # substitute for the spec's.
    note: str = ""
    # Points the environment's installed package at a run's working copy for the run's duration,
    # so tools that drop PYTHONPATH (tox) still import the patched code. Given the run's copy and
    # whether the run's sandbox can bind mounts; yields the (source, target) binds the run needs.
    activate: Callable[[Path, bool], AbstractContextManager[list[tuple[Path, Path]]]] | None = None

    __test__ = False  # pytest: not a test class, whatever its name


@dataclass(frozen=True)
class LocalService:
    """A network service a repository's tests call at an address they read from ``var``, served
    instead on the test run's own loopback (``scoring.execution.services``): the WSGI application
    ``app`` (``module:attribute``) of ``packages``, ready once ``ready_path`` answers 200."""

    name: str
    var: str
    app: str
    packages: tuple[str, ...]
    ready_path: str = "/"


class EnvProvider(Protocol):
    # ``files``: the run's tests (else the patch's files): in a repository of several packages, the
    # env of the package they belong to.
    def get(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> TestEnv: ...


class UnavailableRunner:
    """A backend that cannot run here: every run says why, so the Critic's fallback applies."""

    def __init__(self, reason: str, backend: str, cache_dir: Path):
        self.reason = reason
        self.backend = backend
        self.cache_dir = cache_dir

    def run_suite(self, task: Task, wt: Worktree, patch: str | None, suite: Suite) -> SuiteRun:
        return SuiteRun({}, "", 0.0, error=self.reason, backend=self.backend)

    def env_key(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> str:
        return ""


def run_root(configured: Path | None) -> Path:
    """Where test runs make their working copies: outside any project checkout by default, so
    pytest finds no configuration but the repository's own (it climbs up looking for one).

    The default is one folder per user in the temp dir (``fixgraph-testruns-<uid>``), used only
    when it is a real folder this user owns that no one else may write to: another user could
    have made it first (``/tmp`` is everyone's) and could then swap a run's copy under fixgraph.
    Otherwise this process gets a fresh private folder of its own."""
    if configured is not None:
        configured.mkdir(parents=True, exist_ok=True)
        return configured.resolve()
    root = Path(tempfile.gettempdir()) / f"fixgraph-testruns-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o755)
    st = os.lstat(root)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
        return root.resolve()
    return _private_run_root()


@functools.cache
def _private_run_root() -> Path:
    return Path(tempfile.mkdtemp(prefix=f"fixgraph-testruns-{os.geteuid()}-")).resolve()


def git(work: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """git in a run's own working copy, reading no configuration but what is given here."""
    env = gitsafe.hardened_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
                                "GIT_TERMINAL_PROMPT": "0"})
    return subprocess.run(["git", *args], cwd=work, input=data, capture_output=True, env=env, timeout=600)


@phases.timed("copy of the base commit")
def materialize(wt: Worktree, commit: str, work: Path) -> str:
    """A fresh copy of ``commit`` at ``work`` from the worktree's objects (read only); "" or why not."""
    work.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(wt.path), "archive", "--format=tar", commit],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=gitsafe.hardened_env())
    untar = subprocess.run(["tar", "-x", "-C", str(work)], stdin=archive.stdout, capture_output=True)
    assert archive.stdout is not None
    archive.stdout.close()
    err = archive.stderr.read().decode(errors="replace") if archive.stderr else ""
    if archive.wait() != 0 or untar.returncode != 0:
        return f"cannot copy the base commit: {(err or untar.stderr.decode(errors='replace')).strip()[:300]}"
    # Its own repository, so that ``git apply`` applies here and not in an enclosing repository.
    git(work, "init", "-q")
    return ""


def git_apply(work: Path, patch: str, check_only: bool = False) -> str:
    """Apply ``patch`` in ``work`` as swebench's harness does (git apply, then GNU patch with fuzz);
    "" or the first line of why not."""
    text = patch if patch.endswith("\n") else patch + "\n"
    proc = git(work, "apply", "--whitespace=nowarn", *(["--check"] if check_only else []), "-", data=text.encode())
    if proc.returncode == 0:
        return ""
    if shutil.which("patch"):
        fuzzy = subprocess.run(["patch", "--batch", "--forward", "--fuzz=5", "-p1", "-s",
                                *(["--dry-run"] if check_only else [])], cwd=work,
                               input=text.encode(), capture_output=True, timeout=600)
        if fuzzy.returncode == 0:
            return ""
    msg = proc.stderr.decode(errors="replace").strip().splitlines()
    return msg[0] if msg else "git apply failed"
