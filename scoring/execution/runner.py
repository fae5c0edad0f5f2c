"""The runner: suites run as isolated child processes in an environment per (repo, version).

:class:`SubprocessRunner` copies the base commit outside any project checkout, overlays what the
environment's install step produced, runs the suite in the sandbox (``fixgraph.sandbox``) and parses
its log; :class:`LocalEnvs` is the ``local`` backend's environment (this interpreter);
:func:`make_runner` chooses the backend from the config. What is run and reported is
``scoring.execution.testenv``'s; what the runs mean for a patch is ``scoring.execution.outcomes``'.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fixgraph import phases
from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import Worktree
from fixgraph.sandbox import nofollow
from fixgraph.sandbox.process import Completed, Limits, can_bind, prepare_workdir, run_isolated, scrubbed_env
from scoring.execution import declared_services, patch_deps, services, testenv
from scoring.execution.specs import (
    SpecsError,
    eval_env,
    parse_log,
    patch_files,
    repo_specs,
    test_command,
    test_directives,
    uses_pytest,
)
from scoring.execution.testenv import (
    EnvError,
    EnvProvider,
    Suite,
    SuiteRun,
    SuiteRunner,
    TestEnv,
    git_apply,
    materialize,
    run_root,
    suite_timeout,
)
from scoring.runtime import crash, lines

if TYPE_CHECKING:
    pass



class LocalEnvs:
    """The current interpreter, as is. swebench's test command is used when the repo is known."""

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir

    def get(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> TestEnv:
        spec = None
        if task.version:
            try:
                spec = repo_specs(self.cache_dir, task.repo, task.version)
            except SpecsError:
                spec = None
        # This interpreter's pytest plugins are fixgraph's (and slow to load), not the repo's.
        return TestEnv(python=sys.executable, spec=spec, path_prefix=[str(Path(sys.executable).parent)],
                       key="local-{}.{}".format(*sys.version_info[:2]),
                       extra_env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


class SubprocessRunner:
    """Runs suites as isolated child processes in an environment from ``envs``."""

    def __init__(self, settings: TestSettings, cache_dir: Path, envs: EnvProvider, backend: str):
        self.settings = settings
        self.cache_dir = cache_dir.resolve()
        self.envs = envs
        self.backend = backend
        self.tools = services.ToolEnvs(self.cache_dir / services.TOOLS_DIR, settings.build_timeout_s)

    def _limits(self, suite: Suite, slowed: float) -> Limits:
        return Limits(suite_timeout(suite, self.settings.timeout_s, slowed), self.settings.cpu_s,
                      self.settings.memory_mb, self.settings.network_isolation)

    def env_key(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> str:
        try:
            env = self.envs.get(task, wt, files)
        except (EnvError, SpecsError):
            return ""
        key = env.key
        service = services.declared(task.repo)  # runs with it answer otherwise than runs without
        key = f"{key}+{services.service_key(service)}" if service else key
        declared = declared_services.declared(env.spec)  # the committed table's, started with each run
        return f"{key}+{declared_services.services_key(declared)}" if declared else key

    @phases.timed("test runner")
    def run_suite(self, task: Task, wt: Worktree, patch: str | None, suite: Suite) -> SuiteRun:
        try:
            # The tests decide the package of a repository of several; the patch's files when there are none.
            env = self.envs.get(task, wt, suite.targets or tuple(patch_files(patch or "")))
        except (EnvError, SpecsError) as exc:
            return SuiteRun({}, "", 0.0, error=f"env could not be built: {exc}", backend=self.backend)
        with self._scratch() as (run_dir, work, home, tmp):
            return self._run(task, wt, env, patch, suite, run_dir, work, home, tmp)

    @phases.timed("test runner")
    def run_python(self, task: Task, wt: Worktree, files: Mapping[str, str], argv_tail: Sequence[str],
                   timeout_s: float, *, outputs: Sequence[str] = (),
                   extra_env: Mapping[str, str] | None = None,
                   patch: str | None = None) -> tuple[Completed, dict[str, bytes]]:
        """``<env's python> *argv_tail`` in a fresh copy of the base commit (with ``patch`` applied,
        as the tests apply it, when given), isolated as the tests are (scrubbed environment, no
        network, the backend's CPU and memory limits, killed with its processes after
        ``timeout_s``): for code that is no test suite (``scoring.runtime.issue_run``).

        ``files`` (repository-relative path -> text) are written into the copy first, and the
        command runs from its root; returns what it did and the bytes of each of ``outputs``
        (repository-relative paths) it left there as a regular file (at most
        :data:`MAX_OUTPUT_FILE_BYTES` of each). The services the env's committed table declares
        run around it, as around the tests. Raises :class:`EnvError` when there is no environment,
        no copy of the commit, a file path outside the copy, or a declared service that was not up."""
        try:
            env = self.envs.get(task, wt, tuple(patch_files(patch or "")))
        except (EnvError, SpecsError) as exc:
            raise EnvError(f"env could not be built: {exc}") from exc
        declared = declared_services.declared(env.spec)
        if declared_services.unusable(declared):
            raise EnvError(declared_services.unusable(declared))
        with self._scratch() as (run_dir, work, home, tmp):
            err = materialize(wt, task.base_commit, work)
            if not err and patch is not None and patch.strip():
                _apply_candidate(wt, work, patch)
            for rel, content in files.items():
                err = err or _write_into(work, rel, content)
            if err:
                raise EnvError(err)
            _overlay(env, work)  # a refused artifact shows as the code's own failure
            run_env, _ = self._prepare(env, work, home, tmp=tmp)
            run_env.update(extra_env or {})
            limits = Limits(min(timeout_s, self.settings.timeout_s), self.settings.cpu_s, self.settings.memory_mb,
                            self.settings.network_isolation)
            argv = [env.python, *argv_tail]
            if declared:  # the code the tests would call the services from calls them here too
                argv = declared_services.wrapped(env.python, declared, argv, run_env, run_dir)
            done = self._isolated(env, work, argv, run_env, limits)
            why, _ = declared_services.outcome(run_dir, declared, done.timed_out)
            if why:
                raise EnvError(why)
            return done, {rel: data for rel in outputs if (data := _read_output(work, rel)) is not None}

    @contextlib.contextmanager
    def _scratch(self) -> Iterator[tuple[Path, Path, Path, Path]]:
        """A run's scratch folder, its copy's place, its home and its temp dir: (run_dir, work,
        home, tmp), removed after. The temp dir shares no folder with the copy but ``/``
        (:func:`temp_dir_apart`), as in swebench's images (``/testbed`` and ``/tmp``)."""
        run_dir = run_root(self.settings.run_root) / uuid.uuid4().hex[:12]
        work = run_dir / "repo"
        home = run_dir / "home"
        home.mkdir(parents=True)
        tmp = temp_dir_apart(work)
        # removed by a watchdog if fixgraph is killed mid-run
        prepare_workdir(run_dir, *([tmp] if tmp is not None else []))
        try:
            yield run_dir, work, home, tmp or home
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _isolated(env: TestEnv, work: Path, argv: list[str], run_env: dict[str, str], limits: Limits) -> Completed:
        """``argv`` in the sandbox, from ``work``, with the env pointed at ``work`` for the run."""
        with env.activate(work, can_bind(limits)) if env.activate else contextlib.nullcontext([]) as binds:
            return run_isolated(argv, work, run_env, limits, binds=binds)

    def _lay_out(self, task: Task, wt: Worktree, env: TestEnv, patch: str | None, suite: Suite,
                 run_dir: Path, work: Path) -> tuple[list[str], Path | None, str]:
        """The run's copy at ``work``: the base commit, the candidate patch, the suite's tests as the
        base commit has them plus its added files and test patch. Returns the notes, the folder of
        what the patch adds to the dependencies (None: nothing) and the error that ends the run."""
        notes: list[str] = []
        deps: Path | None = None
        err = materialize(wt, task.base_commit, work)
        if err:
            return notes, deps, err
        saved = {f: _saved(work, f) for f in suite.protected}
        if patch is not None and patch.strip():
            notes += _apply_candidate(wt, work, patch)
            touched = set(patch_files(patch)) & (set(saved) | {p for p, _ in suite.added})
            if touched:
                notes.append("the patch changes test files; they were reset: " + ", ".join(sorted(touched)))
            if self.settings.patch_dependencies:
                deps, said = patch_deps.provide(wt, task.base_commit, work, patch, env.python, run_dir / "deps")
                notes += said
        for rel, data in saved.items():  # the tests are the base commit's, not the patch's
            try:
                if data is None:
                    nofollow.unlink(work, rel)
                elif data is not _LINK:
                    nofollow.write_bytes(work, rel, data)
            except OSError as exc:
                notes.append(f"test file {rel} not reset: {exc}")
        for rel, content in suite.added:
            err = _write_into(work, rel, content, "test path")
            if err:
                return notes, deps, err
        if suite.extra_patch.strip():
            err = git_apply(work, suite.extra_patch)
            if err:
                return notes, deps, f"test_patch does not apply: {err}"
        return notes, deps, ""

    def _run(self, task: Task, wt: Worktree, env: TestEnv, patch: str | None, suite: Suite,
             run_dir: Path, work: Path, home: Path, tmp: Path) -> SuiteRun:
        notes: list[str] = [env.note] if env.note else []
        laid, deps, err = self._lay_out(task, wt, env, patch, suite, run_dir, work)
        notes += laid
        if err:
            return SuiteRun({}, "", 0.0, error=err, backend=self.backend)
        notes += _overlay(env, work)
        run_env, pre_log = self._prepare(env, work, home, deps, tmp)
        argv, cmd_env = test_command(task.repo, env.spec, env.python, own=suite.own)
        notes += _tox_current_env(argv, env, work)
        crash_file = run_dir / "crash.jsonl"
        if uses_pytest(argv):
            plugin_dir = crash.install_plugin(run_dir / "plugin")
            argv += ["-p", crash.PLUGIN_MODULE]
            run_env["PYTHONPATH"] = os.pathsep.join([str(plugin_dir), run_env["PYTHONPATH"]])
        run_env.update(eval_env(env.spec))
        run_env.update(cmd_env)
        trace_dir = run_dir / "lines"
        if suite.trace and patch is not None:
            site = lines.install(run_dir / "site")
            run_env["PYTHONPATH"] = os.pathsep.join([str(site), run_env["PYTHONPATH"]])
            run_env.update(lines.env_for(suite.trace, trace_dir))
        status_file = run_dir / "status.txt"
        run_env.update(FIXGRAPH_CRASH_FILE=str(crash_file), FIXGRAPH_STATUS_FILE=str(status_file),
                       FIXGRAPH_REPO_ROOT=str(work),
                       FIXGRAPH_LOCALS_CHARS=str(self.settings.locals_repr_chars))
        # An inferred env's command is pytest's: test files stay paths, whatever the repository's runner takes.
        directives = test_directives("" if (env.spec or {}).get("inferred") else task.repo, list(suite.targets))
        command, unserved = self._behind_service(task, work, [*argv, *directives], run_env)
        notes += unserved
        declared = declared_services.declared(env.spec)
        if declared_services.unusable(declared):
            return self._not_served(task, env, declared_services.unusable(declared))
        if declared:
            command = declared_services.wrapped(env.python, declared, command, run_env, run_dir)
        slowed = testenv.slowdown()
        limits = self._limits(suite, slowed)
        done = self._isolated(env, work, command, run_env, limits)
        err, started = declared_services.outcome(run_dir, declared, done.timed_out)
        if err:
            return self._not_served(task, env, err, done, pre_log)
        notes += started
        # A test parametrized with a path under the run's copy (tmp dirs, fixtures) would get a
        # new id every run, and never match its base run: ids name the copy as ".".
        kind = str((env.spec or {}).get("parser", ""))
        statuses = {_unroot(t, work): s for t, s in parse_log(task.repo, done.output, kind).items()}
        # A message naming a file of the copy says "./x.py": the Coder sees the repository's paths,
        # not the run's temporary one.
        records = [{**r, "nodeid": _unroot(str(r.get("nodeid", "")), work),
                    "message": _unroot(str(r.get("message", "")), work)} for r in crash.read_records(crash_file)]
        if uses_pytest(argv) and not done.timed_out:
            silence = crash.plugin_silence(crash_file, status_file, statuses)
            notes += [silence] if silence else []
        sig = 0 if done.timed_out else crash.fatal_signal(done.returncode)
        if sig:
            # A crash in compiled code killed pytest before its summary: what finished is known, the
            # test that was running failed with the signal (a runtime finding, not a hang).
            for test, status in crash.read_statuses(status_file).items():
                statuses.setdefault(_unroot(test, work), status)
            died = _unroot(crash.unfinished_test(status_file), work)
            if died:
                statuses[died] = "FAILED"
                records.append(crash.signal_record(died, sig))
            notes.append(f"the test process was killed by {signal.Signals(sig).name} "
                         f"{'in ' + died if died else 'outside any test'}; tests after it did not run")
        if done.timed_out and suite.finished_on_timeout:
            # Killed before its summary: what the plugin saw finish is what the run reports.
            for test, status in crash.read_statuses(status_file).items():
                statuses.setdefault(_unroot(test, work), status)
            notes.append(f"tests killed after {limits.timeout_s:g}s; tests not reported are left out")
        return SuiteRun(statuses, pre_log + done.output, done.seconds, done.timed_out, done.isolated_network,
                        crash_records=records, notes=notes, root=str(work), backend=self.backend,
                        env=testenv.env_made(task, env.spec),
                        timeout_s=limits.timeout_s, slowdown=testenv.slowdown_over(slowed),
                        lines=lines.read(trace_dir, suite.trace, done.timed_out)
                        if suite.trace and patch is not None else None)

    def _not_served(self, task: Task, env: TestEnv, why: str, done: Completed | None = None,
                    pre_log: str = "") -> SuiteRun:
        """A run whose declared services are not all up: no test counts, ``why`` is its error."""
        if done is None:
            return SuiteRun({}, "", 0.0, error=why, backend=self.backend, env=testenv.env_made(task, env.spec))
        return SuiteRun({}, pre_log + done.output, done.seconds, done.timed_out, done.isolated_network, error=why,
                        backend=self.backend, env=testenv.env_made(task, env.spec))

    def _behind_service(self, task: Task, work: Path, argv: list[str],
                        run_env: dict[str, str]) -> tuple[list[str], list[str]]:
        """``argv`` behind the service the repository's tests call (``scoring.execution.services``)
        when the copy ``work`` reads its variable, and ``run_env`` naming its venv; the note of why
        it is not served when its venv cannot be had (the tests then run as they would without it)."""
        service = services.wanted(task.repo, work)
        if service is None:
            return argv, []
        try:
            venv = self.tools.venv(service)
        except services.ServiceError as exc:
            return argv, [f"{service.name} not served, {service.var} left unset: {exc}"]
        run_env[services.SERVICE_VENV_VAR] = str(venv)
        return services.wrapped(venv / "bin" / "python", service, argv), []

    def _prepare(self, env: TestEnv, work: Path, home: Path, deps: Path | None = None,
                 tmp: Path | None = None) -> tuple[dict[str, str], str]:
        """The scrubbed environment for the test process; runs the spec's pre-install edits.
        ``deps``: what the patch added to the install's dependencies (``patch_deps``), after the code;
        ``tmp``: the process's TMPDIR (its home when None)."""
        pythonpath = [str(work / "src")] if (work / "src").is_dir() else []
        pythonpath.append(str(work))
        if deps is not None:
            pythonpath.append(str(deps))
        run_env = scrubbed_env(home, {**env.extra_env, "PYTHONPATH": os.pathsep.join(pythonpath),
                                      **({"TMPDIR": str(tmp)} if tmp is not None else {})}, env.path_prefix)
        log = ""
        for cmd in (env.spec or {}).get("pre_install", []):
            # Seds on setup.py/tox.ini the install step made; tox.ini's edit changes the test command.
            done = run_isolated(["bash", "-c", cmd], work, run_env,
                                Limits(60, 60, self.settings.memory_mb, self.settings.network_isolation))
            if done.returncode != 0:
                log += f"[fixgraph] pre-install step failed: {cmd}\n{done.output}\n"
        return run_env, log


# Where a run's temp dir may go, in this order: the first whose top folder is not the copy's.
TEMP_PARENTS = ("/tmp", "/var/tmp")


def temp_dir_apart(work: Path) -> Path | None:
    """A fresh private temp dir for a run whose copy will be ``work``, sharing no folder with it
    but ``/``; None when no candidate parent is usable (the run's home serves then).

    Tests that compare their working directory with a temp path expect the two apart: docutils
    (sphinx-11510's test) makes an included file's path relative to the working directory when
    they share a folder, and sphinx then names the document ``../home/...``. In swebench's
    images the repository is ``/testbed`` and the temp dir ``/tmp``."""
    top = work.resolve().parts[1] if len(work.resolve().parts) > 1 else ""
    for parent in TEMP_PARENTS:
        base = Path(parent)
        if base.parts[1] == top or not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
            continue
        try:
            return Path(tempfile.mkdtemp(prefix="fixgraph-tmp-", dir=base)).resolve()
        except OSError:
            continue
    return None


def _apply_candidate(wt: Worktree, work: Path, patch: str) -> list[str]:
    """Apply the candidate ``patch`` to the fresh copy ``work``; where it does not apply there,
    copy the files it touched from ``wt``, which holds them patched. The note saying so, if any."""
    err = git_apply(work, patch)
    if not err:
        return []
    _copy_changed(wt, work, patch)
    return [f"candidate patch did not apply to a fresh copy ({err}); copied its files instead"]


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


def _unroot(test_id: str, work: Path) -> str:
    return test_id.replace(str(work), ".") if str(work) in test_id else test_id


def _write_into(work: Path, rel: str, content: str, what: str = "file path") -> str:
    """Write ``content`` at ``rel`` in the run's copy ``work``; "" or why not (a path outside it)."""
    target = (work / rel).resolve()
    if not target.is_relative_to(work.resolve()):
        return f"{what} {rel!r} is outside the repository"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return ""


MAX_OUTPUT_FILE_BYTES = 32_000_000


def _read_output(work: Path, rel: str) -> bytes | None:
    """The bytes of a file the sandboxed code left at ``rel`` in ``work``; None when there is none
    there as a regular file. A link is not followed (the code could point it at fixgraph's own
    files: this process reads with more rights than the code had)."""
    path = work / rel
    if not path.resolve().is_relative_to(work.resolve()) or path.is_symlink():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(MAX_OUTPUT_FILE_BYTES)


def _tox_current_env(argv: list[str], env: TestEnv, work: Path) -> list[str]:
    """``tox --current-env`` runs ``.tox/<env>/bin/python``, a symlink to our interpreter. A venv's
    interpreter reached through a symlink finds no ``pyvenv.cfg`` beside it and loses the venv's
    packages (conda's, which swebench uses, has no such file to lose). Lay one there first; never
    through a link the repository tracks (``.tox`` pointing at a folder of the machine). The notes
    of what was refused."""
    cfg = Path(env.python).parent.parent / "pyvenv.cfg"
    if "tox" not in argv[:3] or "--current-env" not in argv or not cfg.is_file():
        return []
    names = [a[2:] for a in argv if a.startswith("-e") and len(a) > 2]
    names += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-e"]
    notes = []
    for name in names:
        for one in name.split(","):
            try:
                nofollow.write_bytes(work, f".tox/{one}/pyvenv.cfg", cfg.read_bytes())
                lib = work / ".tox" / one / "lib"
                if not lib.is_symlink() and not lib.exists():
                    lib.symlink_to(cfg.parent / "lib")
            except OSError as exc:
                notes.append(f"tox env {one!r} not prepared: {exc}")
    return notes


# A protected test file the base commit holds as a symlink: left as it is, never read through.
_LINK = b"\0link"


def _saved(work: Path, rel: str) -> bytes | None:
    try:
        return nofollow.read_bytes(work, rel)
    except nofollow.Refused:
        return _LINK
    except OSError:
        return None


def _overlay(env: TestEnv, work: Path) -> list[str]:
    """Copy the install step's artifacts into the run's copy ``work``. Both sides were shaped by
    the repository (the copy tracks its symlinks; the installed checkout is what the install step
    left): nothing is followed through a link, and each refusal is a note for the run's record."""
    if env.artifacts_root is None:
        return []
    refused = []
    for rel in env.artifacts:
        try:
            nofollow.copy_file(env.artifacts_root, rel, work)
        except FileNotFoundError:
            continue
        except OSError as exc:
            refused.append(f"{rel} ({exc})")
    if not refused:
        return []
    return [f"install artifacts not copied (a symlink on the way is never followed): {'; '.join(refused[:5])}"
            + (f" and {len(refused) - 5} more" if len(refused) > 5 else "")]


def make_runner(settings: TestSettings, cache_dir: Path) -> SuiteRunner:
    if settings.backend == "local":
        return SubprocessRunner(settings, cache_dir, LocalEnvs(cache_dir), "local")
    if settings.backend == "venv":
        from scoring.execution.envs import VenvEnvs

        root = settings.env_dir or cache_dir / "envs"
        return SubprocessRunner(settings, cache_dir, VenvEnvs(root, cache_dir, settings), "venv")
    from scoring.execution.docker import make_docker_runner

    return make_docker_runner(settings, cache_dir)
