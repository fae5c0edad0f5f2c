"""Running a SWE-bench instance's own tests before and after a candidate patch.

A run builds its own working copy (``git archive`` of the base commit from the task's worktree,
which it only reads), applies the candidate patch, puts the test files back to the base commit's
content, applies ``test_patch`` (as swebench's harness does: a patch cannot win by editing the
tests) and runs the repo's own test command on the test patch's files in an isolated process
(``scoring.sandbox``). Outputs are parsed with swebench's log parsers. The run without the
candidate patch ("before") is cached per instance.

Backends (``TestSettings.backend``): ``venv`` builds a virtualenv per (repo, version) from
swebench's install specs (``scoring.envs``); ``local`` runs with the current interpreter (for
fixture repos and machines already set up); ``docker`` uses the official SWE-bench instance
images (``scoring.docker``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fixgraph import gitsafe
from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.workspace import Worktree, content_key
from scoring import crash
from scoring.sandbox import Limits, prepare_workdir, run_isolated, scrubbed_env
from scoring.specs import (
    SpecsError,
    parse_log,
    patch_files,
    repo_specs,
    test_command,
    test_directives,
    uses_pytest,
)

PASSING = ("PASSED", "XFAIL")  # swebench's grading counts an expected failure as a pass
LOG_TAIL_CHARS = 3000


@dataclass
class TestOutcome:
    runnable: bool
    reason: str  # why not runnable; "" when it ran
    fail_to_pass: dict[str, str] = field(default_factory=dict)  # id -> PASSED|FAILED|ERROR|SKIPPED|MISSING
    pass_to_pass_before: dict[str, str] = field(default_factory=dict)
    pass_to_pass_after: dict[str, str] = field(default_factory=dict)
    crash: str = ""  # crash context for the Coder
    seconds: float = 0.0
    log_tail: str = ""
    timed_out: bool = False
    network_isolated: bool = False
    backend: str = ""
    notes: list[str] = field(default_factory=list)

    __test__ = False  # pytest: not a test class, whatever its name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TestRunner(Protocol):
    __test__ = False

    def run(self, instance: Instance, wt: Worktree, patch: str) -> TestOutcome: ...


class EnvError(Exception):
    """The test environment for an instance cannot be built; the message is the reason."""


@dataclass
class TestEnv:
    """Where and how an instance's tests run: interpreter, PATH additions, setup leftovers."""

    python: str
    spec: dict[str, Any] | None
    path_prefix: list[str] = field(default_factory=list)
    # Files the install step generated (compiled extensions, _version.py, egg-info), to copy
    # into a fresh working copy where missing: relative path -> absolute source path.
    artifacts_root: Path | None = None
    artifacts: list[str] = field(default_factory=list)
    key: str = "local"
    extra_env: dict[str, str] = field(default_factory=dict)
    # Points the environment's installed package at a run's working copy for the run's duration
    # (venv: the editable install's source path is a symlink), so tools that drop PYTHONPATH
    # (tox) still import the patched code.
    activate: Callable[[Path], AbstractContextManager[None]] | None = None


class EnvProvider(Protocol):
    def get(self, instance: Instance, wt: Worktree) -> TestEnv: ...


class LocalEnvs:
    """The current interpreter, as is. swebench's test command is used when the repo is known."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir

    def get(self, instance: Instance, wt: Worktree) -> TestEnv:
        spec = None
        if instance.version:
            try:
                spec = repo_specs(self.cache_dir, instance.repo, instance.version)
            except SpecsError:
                spec = None
        # This interpreter's pytest plugins are fixgraph's (and slow to load), not the repo's.
        return TestEnv(python=sys.executable, spec=spec, path_prefix=[str(Path(sys.executable).parent)],
                       key="local-{}.{}".format(*sys.version_info[:2]),
                       extra_env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


@dataclass
class _Run:
    statuses: dict[str, str]
    log: str
    seconds: float
    timed_out: bool = False
    network_isolated: bool = False
    error: str = ""  # set when the run could not happen (test_patch does not apply, ...)
    crash_records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    root: str = ""  # where the working copy was, to read paths in the log


class SubprocessRunner:
    """Runs tests as isolated child processes in an environment from ``envs``."""

    def __init__(self, settings: TestSettings, cache_dir: Path, envs: EnvProvider, backend: str):
        self.settings = settings
        self.cache_dir = cache_dir.resolve()
        self.envs = envs
        self.backend = backend
        self.limits = Limits(settings.timeout_s, settings.cpu_s, settings.memory_mb,
                             settings.network_isolation)

    # ---- public -------------------------------------------------------------------------

    def run(self, instance: Instance, wt: Worktree, patch: str) -> TestOutcome:
        out = TestOutcome(runnable=False, reason="", backend=self.backend)
        if not instance.FAIL_TO_PASS:
            out.reason = "no FAIL_TO_PASS tests"
            return out
        try:
            env = self.envs.get(instance, wt)
        except (EnvError, SpecsError) as exc:
            out.reason = f"env could not be built: {exc}"
            return out
        before = self._before(instance, wt, env)
        out.seconds += before.seconds
        out.pass_to_pass_before = {t: before.statuses.get(t, "MISSING") for t in instance.PASS_TO_PASS}
        if before.error:
            out.reason = before.error
            out.log_tail = _tail(before.log)
            return out
        # No change: the run without the patch is the answer (and it is cached).
        after = self._run_once(instance, wt, env, patch) if patch.strip() else before
        out.seconds += after.seconds if after is not before else 0.0
        ids = instance.FAIL_TO_PASS + instance.PASS_TO_PASS
        if not any(t in before.statuses or t in after.statuses for t in ids):
            # None of the instance's tests was reported, with or without the patch: a collection
            # error, an environment that cannot import the package, a hang. Nothing here can say
            # whether the patch works. (Without the patch alone is not enough: some bugs crash
            # the test runner itself, pytest-dev__pytest-7168.)
            out.reason = _nothing_collected(before)
            out.log_tail = _tail(before.log)
            out.timed_out = before.timed_out
            return out
        out.log_tail = _tail(after.log)
        out.timed_out = after.timed_out
        out.network_isolated = after.network_isolated
        out.notes = before.notes + after.notes
        if after.error:
            out.reason = after.error
            return out
        out.runnable = True
        out.fail_to_pass = {t: after.statuses.get(t, "MISSING") for t in instance.FAIL_TO_PASS}
        out.pass_to_pass_after = {t: after.statuses.get(t, "MISSING") for t in instance.PASS_TO_PASS}
        if after.timed_out:
            out.notes.append(f"tests killed after {self.settings.timeout_s:g}s; unreported tests count as MISSING")
        out.crash = self._crash_context(out, after)
        return out

    # ---- internals ----------------------------------------------------------------------

    def _before(self, instance: Instance, wt: Worktree, env: TestEnv) -> _Run:
        """The run without the candidate patch, cached per instance (and test patch, env)."""
        key = content_key(instance.base_commit, instance.test_patch, json.dumps(instance.FAIL_TO_PASS),
                          json.dumps(instance.PASS_TO_PASS), env.key, self.backend)
        path = self.cache_dir / "test-baselines" / f"{instance.instance_id.replace('/', '_')}-{key}.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                return _Run(statuses=data["statuses"], log=data["log"], seconds=0.0,
                            timed_out=data.get("timed_out", False), error=data.get("error", ""),
                            network_isolated=data.get("network_isolated", False))
            except (json.JSONDecodeError, KeyError):
                pass
        run = self._run_once(instance, wt, env, None)
        if not run.timed_out:  # a timeout may be load on the machine; do not pin it
            from fixgraph.records import atomic_write

            atomic_write(path, json.dumps({"statuses": run.statuses, "log": _tail(run.log),
                                           "timed_out": run.timed_out, "error": run.error,
                                           "network_isolated": run.network_isolated}))
        return run

    def _run_once(self, instance: Instance, wt: Worktree, env: TestEnv, candidate: str | None) -> _Run:
        run_dir = self.cache_dir / "testruns" / uuid.uuid4().hex[:12]
        work = run_dir / "repo"
        home = run_dir / "home"
        home.mkdir(parents=True)
        prepare_workdir(run_dir)  # removed by the sandbox if fixgraph is killed mid-run
        try:
            notes: list[str] = []
            err = _materialize(wt, instance.base_commit, work)
            if err:
                return _Run({}, "", 0.0, error=err)
            test_ids = instance.FAIL_TO_PASS + instance.PASS_TO_PASS
            directives = test_directives(instance.repo, instance.test_patch, test_ids)
            test_files = [f for f in patch_files(instance.test_patch) if f.endswith(".py")]
            for tid in test_ids:
                f = tid.split("::", 1)[0]
                if f.endswith(".py") and f not in test_files:
                    test_files.append(f)
            saved = {f: (work / f).read_bytes() if (work / f).is_file() else None for f in test_files}
            if candidate is not None and candidate.strip():
                err = _git_apply(work, candidate)
                if err:
                    notes.append(f"candidate patch did not apply to a fresh copy ({err}); copied its files instead")
                    _copy_changed(wt, work, candidate)
                touched = set(patch_files(candidate)) & set(saved)
                if touched:
                    notes.append("the patch changes test files; they were reset to the base commit: "
                                 + ", ".join(sorted(touched)))
            for rel, data in saved.items():  # the tests are the instance's, not the patch's
                target = work / rel
                if data is None:
                    target.unlink(missing_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
            if instance.test_patch.strip():
                err = _git_apply(work, instance.test_patch)
                if err:
                    return _Run({}, "", 0.0, error=f"test_patch does not apply: {err}")
            _overlay(env, work)
            run_env, pre_log = self._prepare(env, work, home)
            argv, cmd_env = test_command(instance.repo, env.spec, env.python)
            _tox_current_env(argv, env, work)
            crash_file = run_dir / "crash.jsonl"
            if uses_pytest(argv):
                plugin_dir = crash.install_plugin(run_dir / "plugin")
                argv += ["-p", crash.PLUGIN_MODULE]
                run_env["PYTHONPATH"] = os.pathsep.join([str(plugin_dir), run_env["PYTHONPATH"]])
            run_env.update(cmd_env)
            run_env.update(FIXGRAPH_CRASH_FILE=str(crash_file), FIXGRAPH_REPO_ROOT=str(work),
                           FIXGRAPH_LOCALS_CHARS=str(self.settings.locals_repr_chars))
            with env.activate(work) if env.activate else contextlib.nullcontext():
                done = run_isolated([*argv, *directives], work, run_env, self.limits)
            log = pre_log + done.output
            statuses = parse_log(instance.repo, done.output)
            records = crash.read_records(crash_file)
            return _Run(statuses, log, done.seconds, done.timed_out, done.isolated_network,
                        crash_records=records, notes=notes, root=str(work))
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _prepare(self, env: TestEnv, work: Path, home: Path) -> tuple[dict[str, str], str]:
        """The scrubbed environment for the test process; runs the spec's pre-install edits."""
        pythonpath = [str(work / "src")] if (work / "src").is_dir() else []
        pythonpath.append(str(work))
        run_env = scrubbed_env(home, {**env.extra_env, "PYTHONPATH": os.pathsep.join(pythonpath)},
                               env.path_prefix)
        log = ""
        for cmd in (env.spec or {}).get("pre_install", []):
            # Seds on setup.py/tox.ini the install step made; tox.ini's edit changes the test command.
            done = run_isolated(["bash", "-c", cmd], work, run_env,
                                Limits(60, 60, self.limits.memory_mb, self.limits.network_isolation))
            if done.returncode != 0:
                log += f"[fixgraph] pre-install step failed: {cmd}\n{done.output}\n"
        return run_env, log

    def _crash_context(self, out: TestOutcome, after: _Run) -> str:
        """Why the tests the patch should make pass (or keep passing) failed."""
        failing = [t for t, s in out.fail_to_pass.items() if s not in PASSING]
        failing += [t for t, s in out.pass_to_pass_after.items()
                    if s not in PASSING and out.pass_to_pass_before.get(t) in PASSING]
        if not failing:
            return ""
        if after.crash_records:  # the pytest plugin's: frames and locals
            return crash.format_records(after.crash_records, failing)
        return crash.from_log(after.log, Path(after.root), failing) if after.root else ""


def _tail(log: str) -> str:
    return log[-LOG_TAIL_CHARS:]


def _nothing_collected(run: _Run) -> str:
    if run.timed_out:
        return "nothing collected: the test command timed out"
    lines = [ln for ln in run.log.strip().splitlines() if ln.strip() and not ln.startswith("[fixgraph]")]
    errors = [ln for ln in lines if re.match(r"^E\s+\w*(Error|Exception)", ln)]
    last = (errors or lines)[-1:] or ["no output"]
    return f"nothing collected ({last[0].strip()[:200]})"


def _git(work: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = gitsafe.hardened_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)})
    return subprocess.run(["git", *args], cwd=work, input=data, capture_output=True, env=env, timeout=600)


def _materialize(wt: Worktree, commit: str, work: Path) -> str:
    """A fresh copy of ``commit`` at ``work`` from the worktree's objects (read only)."""
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
    _git(work, "init", "-q")
    return ""


def _git_apply(work: Path, patch: str) -> str:
    text = patch if patch.endswith("\n") else patch + "\n"
    proc = _git(work, "apply", "--whitespace=nowarn", "-", data=text.encode())
    if proc.returncode == 0:
        return ""
    # swebench's harness falls back to GNU patch with fuzz; so do we.
    if shutil.which("patch"):
        fuzzy = subprocess.run(["patch", "--batch", "--forward", "--fuzz=5", "-p1", "-s"], cwd=work,
                               input=text.encode(), capture_output=True, timeout=600)
        if fuzzy.returncode == 0:
            return ""
    msg = proc.stderr.decode(errors="replace").strip().splitlines()
    return msg[0] if msg else "git apply failed"


def _copy_changed(wt: Worktree, work: Path, patch: str) -> None:
    for rel in patch_files(patch):
        src = wt.path / rel
        dst = work / rel
        if src.is_file() or src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.unlink(missing_ok=True)
            # A link the patch made stays a link: copying its target would read it as fixgraph.
            shutil.copyfile(src, dst, follow_symlinks=False)
        else:
            dst.unlink(missing_ok=True)


def _tox_current_env(argv: list[str], env: TestEnv, work: Path) -> None:
    """``tox --current-env`` runs ``.tox/<env>/bin/python``, a symlink to our interpreter. A venv's
    interpreter reached through a symlink finds no ``pyvenv.cfg`` beside it and loses the venv's
    packages (conda's, which swebench uses, has no such file to lose). Lay one there first."""
    cfg = Path(env.python).parent.parent / "pyvenv.cfg"
    if "tox" not in argv[:3] or "--current-env" not in argv or not cfg.is_file():
        return
    names = [a[2:] for a in argv if a.startswith("-e") and len(a) > 2]
    names += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-e"]
    for name in names:
        for one in name.split(","):
            box = work / ".tox" / one
            box.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cfg, box / "pyvenv.cfg")
            if not (box / "lib").exists():
                (box / "lib").symlink_to(cfg.parent / "lib")


def _overlay(env: TestEnv, work: Path) -> None:
    if env.artifacts_root is None:
        return
    for rel in env.artifacts:
        src, dst = env.artifacts_root / rel, work / rel
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


class UnavailableRunner:
    """A backend that cannot run here: every outcome says why, so the fallback applies."""

    def __init__(self, reason: str, backend: str):
        self.reason = reason
        self.backend = backend

    def run(self, instance: Instance, wt: Worktree, patch: str) -> TestOutcome:
        return TestOutcome(runnable=False, reason=self.reason, backend=self.backend)


def make_runner(settings: TestSettings, cache_dir: Path) -> TestRunner:
    if settings.backend == "local":
        return SubprocessRunner(settings, cache_dir, LocalEnvs(cache_dir), "local")
    if settings.backend == "venv":
        from scoring.envs import VenvEnvs

        root = settings.env_dir or cache_dir / "envs"
        return SubprocessRunner(settings, cache_dir, VenvEnvs(root, cache_dir, settings), "venv")
    from scoring.docker import make_docker_runner

    return make_docker_runner(settings, cache_dir)
