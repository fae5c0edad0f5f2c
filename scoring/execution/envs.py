"""A virtualenv per (repo, version), built once from swebench's install specs and cached.

The build follows swebench's own recipe where a virtualenv can. Once per (repo, version): the
spec's Python (found, provisioned by uv, or a substitute measured safe: scoring.execution.interpreters;
never silently another minor), its ``packages`` (the repo's requirements files read at
the ``environment_setup_commit``, or package names) and its ``pip_packages``. Then, as swebench
does per instance, the spec's ``pre_install`` and ``install`` run in a checkout of the instance's
``base_commit`` (dependencies change between commits); that is redone only when an instance with
another base commit comes and something the install reads changed between the two commits (build
files, compiled sources, a top-level module, the folders of what the install generated).
Conda-only parts (``environment.yml``) are left out; the ``pip_packages`` carry what those repos
need. Files the install step creates in the checkout
(compiled extensions, ``_version.py``) are listed and copied into each test run's fresh working
copy; the editable install's path is a symlink pointed at that copy for the run.

A failed build is cached too (``env.json`` says why) so it is not retried on every attempt. A
failure in a pip step (the index may have been busy) gets one more build; any other is final:
delete the env's folder to retry.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fixgraph import phases
from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.records import atomic_write, file_lock
from fixgraph.repo import gitsafe
from fixgraph.repo.workspace import Worktree
from fixgraph.sandbox import nofollow
from fixgraph.sandbox.process import Limits, run_isolated, scrubbed_env
from scoring.execution import envcheck
from scoring.execution.compiled import (
    ENV_YML_TEST_PACKAGES,
    LINK_BIN_SUBDIR,
    LINK_CACHE_VERSION,
    CompiledBuild,
    build_requires,
    classify_failure,
    compiled_build,
    download_stand_ins,
    is_compiled,
    missing_system_packages,
    offline_pre_install,
    reuse_generated,
    with_wheel_pins,
)
from scoring.execution.infer import ConfigError, as_spec, git_output, infer_at, package_of
from scoring.execution.interpreters import resolve, version_tuple
from scoring.execution.specs import repo_specs, requirements_paths, requirements_text
from scoring.execution.testenv import EnvError, LocalService, TestEnv, materialize

# Later releases of these packages break the old code of these repos (docutils 0.22 dropped the
# ``roman`` module Sphinx 3.x imports); swebench's images were built before those releases.
ERA_CONSTRAINTS: dict[str, list[str]] = {
    "sphinx-doc/sphinx": ["docutils<0.22", "Pygments<2.19"],
}

# Under a substitute Python, pip would pick build tools the spec's Python never had: setuptools 61+
# refuses scikit-learn 0.2x's setup.py (its package discovery sees sklearn, build_tools and
# maint_tools), which the 59.6 that 3.6 gets builds. So a substitute env keeps the newest setuptools
# of the spec's Python, the one the harness built with.
SPEC_ERA_PINS: dict[str, list[str]] = {"3.6": ["setuptools<60"], "3.7": ["setuptools<68.1"]}

# Where the harness whose verdicts we compare with ran another Python than swebench's specs name
# today. sympy 1.0: the AutoCodeRover eval logs (the 2024 harness, lite_predictions/*) print
# ``executable: /opt/pyenv/versions/3.7.17/bin/python`` for every sympy 1.0 instance; the specs say
# 3.9, where ``parse_expr(..., evaluate=False)`` fails (ast changed in 3.8) and tests the harness
# ran green fail here. Every other (repo, version) in those logs ran the specs' Python.
HARNESS_PYTHON: dict[tuple[str, str], str] = {("sympy/sympy", "1.0"): "3.7"}

# Requirements a virtualenv cannot satisfy on this machine (a system library or a service that pip
# does not bring), left out of the build with the reason; the tests that want them skip.
# django: ``pylibmc`` compiles against libmemcached's headers (libmemcached-dev, not installed
# here) and its cache tests skip without it (``PyLibMCCacheTests`` are skipped when no memcached
# is configured); ``pywatchman`` talks to the watchman service, which a venv cannot run, and
# ``utils_tests.test_autoreload``'s watchman tests skip when the client or the service is absent.
LEFT_OUT: dict[str, dict[str, str]] = {
    "django/django": {
        "pylibmc": "needs libmemcached's headers (libmemcached-dev) to build; memcached tests skip",
        "pywatchman": "a client of the watchman service, which a venv cannot run; watchman tests skip",
    },
}

HTTPBIN = LocalService("httpbin", var="HTTPBIN_URL", app="httpbin:app", packages=("httpbin==0.10.4",),
                       ready_path="/get")

LOCAL_SERVICES: dict[str, LocalService] = {"psf/requests": HTTPBIN}
"""Services a repository's tests call over the internet, served on each test run's own loopback
instead (``scoring.execution.services``), for the runs whose tests read the service's variable.

psf/requests: the tests of 0.14 to 2.7 (``test_requests.py``; ``tests/test_requests.py`` at 0.14)
call httpbin at ``HTTPBIN_URL``, ``http://httpbin.org/`` when it is unset. The harness's
containers reach httpbin.org; a run here has no network, so every such test failed on a name
lookup, at the base commit and with any patch: the local grader disagreed with the official
verdict on every requests-2317 row, and the Critic's regression runs on requests said nothing.
httpbin 0.10.4 is httpbin.org's code. From 2.10 on the tests take pytest-httpbin's ``httpbin``
fixture instead, which serves on 127.0.0.1 from the test process itself and reads no variable:
nothing is started for them."""

# Git submodules are not in a ``git archive`` checkout; where PyPI has the same code, install it.
SUBMODULE_PACKAGES: dict[str, str] = {"astropy_helpers": "astropy-helpers<3.2"}

# Build-time settings passed through to pip: certificates, pip's own configuration. No proxy variables: a
# step reaches the index through fixgraph's index proxy, which goes out through fixgraph's own proxy.
_BUILD_PASSTHROUGH = re.compile(r"^(PIP_\w+|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)$")
_SKIP_ARTIFACT_DIRS = {"__pycache__", ".git", ".eggs", ".tox", "build", ".pytest_cache"}
_MAX_ARTIFACT_BYTES = 50_000_000

# What an install reads besides the package's Python files: its build configuration, compiled
# extensions' sources, and the metadata (entry points, requirements) it writes.
_INSTALL_INPUT = re.compile(r"(^|/)(setup\.py|setup\.cfg|pyproject\.toml|setup_package\.py|setupext\.py)$"
                            r"|^requirements[^/]*\.txt$|\.(c|cc|cpp|cxx|h|hpp|pyx|pxd|pxi|f|f90|rs|templ)$")
# setup.cfg sections that configure tools, not the install (tests read them from the run's copy).
_TOOL_SECTION = re.compile(r"^(tool:|flake8|isort|mypy|coverage|pycodestyle|pydocstyle|pep8|bdist_wheel|aliases|"
                           r"build_sphinx|egg_info|check-manifest|codespell|doc8|zest|versioneer)")
# A line of a setup.py list of names (packages, classifiers): editable installs do not read them. A
# version specifier (``'mpmath>=0.19',``) is a requirement, not a name.
_LISTED_NAME = re.compile(r"""^\s*(['"][^'"<>=~!]*['"],?\s*)+(#.*)?$|^\s*(#.*)?$""")
# Artifacts that record the install (metadata, setuptools_scm's version file) rather than build code.
_METADATA_ARTIFACT = re.compile(r"(\.egg-info|\.dist-info)(/|$)|(^|/)_?version\.py$")
# Commits reused per env, remembered for the record (the newest ones).
_MAX_SERVED = 50


def build_env(home: Path, venv: Path) -> dict[str, str]:
    """The environment of a build step in ``venv``: scrubbed, with pip's own settings passed through."""
    extra = {k: v for k, v in os.environ.items()
             if _BUILD_PASSTHROUGH.match(k) and not re.search(r"://[^/\s]*@", v)}
    extra["VIRTUAL_ENV"] = str(venv)
    return scrubbed_env(home, extra, [str(venv / "bin")])


# Installs of one base commit tried before its failure is final (cached with the reason): the
# first failure may be transient, a later one says the commit does not install here.
INSTALL_TRIES = 2
# Likewise for the env's build, when it failed in a step that reaches the package index (pip): it is
# built once more. A failure that cannot change (no such Python here, no requirements file) is final.
BUILD_TRIES = 2


def pip_requirement(spec: dict[str, Any]) -> str:
    """The pip the venv is upgraded to: the newest, unless the spec's install command names an option
    pip has since removed (``--no-use-pep517``, gone in pip 25.3: scikit-learn's specs)."""
    return "pip<25.3" if "--no-use-pep517" in str(spec.get("install", "")) else "pip"


class VenvEnvs:
    def __init__(self, root: Path, cache_dir: Path, settings: TestSettings,
                 specs: Callable[[str, str], dict[str, Any] | None] | None = None):
        self.root = root.resolve()
        self.cache_dir = cache_dir.resolve()
        self.settings = settings
        # swebench's specs unless given (tests give a spec for a fixture repo)
        self.specs = specs or (lambda repo, version: repo_specs(self.cache_dir, repo, version))
        # (repo, base commit, package) -> the spec inferred from that commit's files, or why there is none
        self._inferred: dict[tuple[str, str, str], dict[str, Any] | str] = {}
        self._tracked: dict[tuple[str, str], frozenset[str]] = {}  # (repo, commit) -> the files it tracks

    def env_path(self, task: Task, spec: dict[str, Any] | None = None) -> Path:
        # A pinned Python gets its own folder: the env built from the specs may be in use.
        pinned = self.settings.python or HARNESS_PYTHON.get((task.repo, task.version))
        # An inferred env is keyed by what it was built from: the issues of a repository share it
        # while its dependency files stay the same, whatever their version field says.
        name = f"inferred-{spec['env_key']}" if spec and spec.get("inferred") else task.version
        return self.root / (f"{task.repo_slug}__{name}" + (f"-py{pinned}" if pinned else ""))

    def spec_for(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> dict[str, Any]:
        """swebench's spec for the task's (repo, version); for one it has no spec for (another
        repository, an empty or unknown version), the environment inferred from the base commit's
        own files and the maintainer's committed table (``scoring.execution.infer``): in a
        repository of several packages, those of the package ``files`` (the run's tests, else the
        patch's files) belong to."""
        return self.spec_in(task, wt.path, files)

    def spec_in(self, task: Task, git_dir: Path, files: Sequence[str] = ()) -> dict[str, Any]:
        """:meth:`spec_for` read from any git repository holding the task's base commit (a bare clone:
        ``--check`` names an inferred env without a checkout); raises EnvError on a bad committed table."""
        spec = self.specs(task.repo, task.version) if task.version else None
        if spec is not None:
            return spec
        package = self._package(task, git_dir, files)
        key = (task.repo, task.base_commit, package)
        if key not in self._inferred:
            try:
                self._inferred[key] = as_spec(infer_at(git_dir, task.base_commit, package))
            except ConfigError as exc:
                self._inferred[key] = str(exc)
        found = self._inferred[key]
        if isinstance(found, str):
            raise EnvError(found)
        return found

    def _package(self, task: Task, git_dir: Path, files: Sequence[str]) -> str:
        if not files:
            return ""
        key = (task.repo, task.base_commit)
        if key not in self._tracked:
            try:
                self._tracked[key] = frozenset(git_output(git_dir, "ls-tree", "-r", "--name-only",
                                                          task.base_commit).splitlines())
            except ConfigError:
                return ""  # the inference that follows says why the commit cannot be read
        return package_of(self._tracked[key], files)

    def record_path(self, task: Task, wt: Worktree) -> Path:
        """Where ``task``'s env keeps its record, a spec's or an inferred one's (by what it is built
        from); a table that cannot be read names no inferred env: the version's folder."""
        try:
            return self.env_path(task, self.spec_for(task, wt))
        except EnvError:
            return self.env_path(task)

    @phases.timed("env lookup")
    def get(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> TestEnv:
        spec = self.spec_for(task, wt, files)
        if (task.repo, task.version) in HARNESS_PYTHON:
            spec = {**spec, "python": HARNESS_PYTHON[(task.repo, task.version)]}
        if self.settings.python:
            spec = {**spec, "python": self.settings.python, "spec_python": spec.get("python")}
        if is_compiled(task.repo):  # the test runs redo pre_install too: not its downloads and apt-get
            spec = {**with_wheel_pins(task.repo, task.version, spec),
                    "pre_install": offline_pre_install(list(spec.get("pre_install", [])))}
        path = self.env_path(task, spec)
        with file_lock(path.parent / f"{path.name}.lock"):
            meta_path = path / "env.json"
            meta = self._built(task, wt, spec, path, env_record(path))
            if meta.get("ok") and "site" not in meta and (path / "venv").is_dir():
                # Built before this check: what it holds now is what later runs must find.
                site = envcheck.listing(path / "venv")
                meta = {**meta, "site": site, "site_build": meta.get("site_build", site)}
                atomic_write(meta_path, json.dumps(meta, indent=1))
            if (path / "src").exists() and not (path / "src").is_symlink():
                # an install stopped midway (fixgraph itself killed): its half-built tree is never used
                shutil.rmtree(path / "src", ignore_errors=True)
                if (path / "base").is_dir():
                    _link_source(path)
            extras = ENV_YML_TEST_PACKAGES.get(task.repo, []) if spec.get("packages") == "environment.yml" else []
            if meta.get("ok") and extras and meta.get("test_packages") != extras:
                # environment.yml's test packages: in a new env's build, or added to one built before
                run = self._steps(path, task, meta)
                vpy = str(path / "venv" / "bin" / "python")
                if run([vpy, "-m", "pip", "install", "-q", *extras], path, "test_packages"):
                    meta["test_packages"] = extras
                    atomic_write(meta_path, json.dumps(meta, indent=1))
                else:
                    raise EnvError(f"installing environment.yml's test packages failed: {meta['step_error']}")
            installed = meta.get("installed_commit")
            if (meta.get("ok") and installed and installed != task.base_commit and self.settings.reuse_install
                    and _editable(str(spec.get("install", "")))
                    and not install_differs(wt, installed, task.base_commit, meta.get("artifacts", []))):
                # the install at ``installed`` is this commit's too: each run binds its own copy
                served = [c for c in meta.get("serves", []) if c != task.base_commit] + [task.base_commit]
                meta["serves"] = served[-_MAX_SERVED:]
                atomic_write(meta_path, json.dumps(meta, indent=1))
            elif meta.get("ok") and installed != task.base_commit:
                failed = meta.setdefault("failed_installs", {})
                tries = meta.setdefault("install_tries", {})
                if task.base_commit in failed and tries.get(task.base_commit, 1) < INSTALL_TRIES:
                    del failed[task.base_commit]  # once more: a failure may be transient (a busy index)
                if task.base_commit not in failed:
                    tries[task.base_commit] = tries.get(task.base_commit, 0) + 1
                    with file_lock(path.parent / f"{path.name}.run.lock"):  # no run may use it meanwhile
                        self._install(task, wt, spec, path, meta)
                    atomic_write(meta_path, json.dumps(meta, indent=1))
                if task.base_commit in failed:
                    raise EnvError(failed[task.base_commit])
        if not meta.get("ok"):
            raise EnvError(meta.get("reason", "unknown build failure"))
        venv = path / "venv"
        note = str(meta.get("python_note", "")) if meta.get("python_how") == "substitute" else ""
        return TestEnv(python=str(venv / "bin" / "python"), spec=spec, path_prefix=[str(venv / "bin")],
                       artifacts_root=path / "base", artifacts=list(meta.get("artifacts", [])), note=note,
                       # a rebuilt env (or a reinstall) must not reuse runs cached with the old one
                       key=(f"venv-{path.name}-py{meta.get('python_version')}"
                            f"-{meta.get('build_id', '0')}-{meta.get('installed_commit', '')[:12]}"
                            # an install linked through the link cache is not one linked before it
                            + (f"-lc{meta['link_cache']}" if meta.get("link_cache") else "")),
                       extra_env={"VIRTUAL_ENV": str(venv)},
                       activate=lambda work, can_bind: _pointed_at(path, work, can_bind))

    def _built(self, task: Task, wt: Worktree, spec: dict[str, Any], path: Path,
               meta: dict[str, Any] | None) -> dict[str, Any]:
        """The env's record: ``meta`` (its ``env.json``, None when missing or unreadable), or that
        of a new build when the env is due one. It is due one when it has no record; when its build
        failed in a step that may succeed later (``retryable``: pip, the index may have been busy)
        and it was built fewer than :data:`BUILD_TRIES` times (a failed record without
        ``build_tries`` counts as one); and when it was built but changed outside fixgraph's build
        and installs (:func:`_tainted`), never used as it is: rebuilt, counted as a first build; and
        when it failed on what the machine lacked (:func:`machine_fault`) and the machine has it now.
        Any other failed build is final. A failed install at one base commit is not a build (its
        own tries: ``install_tries``)."""
        if meta is None:
            tries, tainted = 1, ""
        elif tainted := _tainted(path, meta):
            tries = 1
        elif not meta.get("ok") and meta.get("retryable") and meta.get("build_tries", 1) < BUILD_TRIES:
            tries = meta.get("build_tries", 1) + 1
        elif machine_fault(meta) and not self.lacks(task, spec):
            tries = 1  # the user did what the reason said (installed the Python or the package)
        else:
            return meta
        # A tainted env was built, so runs may be using it: none may while it is rebuilt.
        with file_lock(path.parent / f"{path.name}.run.lock") if tainted else contextlib.nullcontext():
            meta = {**self._build(task, wt, spec, path), "build_tries": tries}
        if tainted:
            meta["rebuilt_because"] = tainted
        atomic_write(path / "env.json", json.dumps(meta, indent=1))
        return meta

    def lacks(self, task: Task, spec: dict[str, Any]) -> str:
        """What this machine lacks to build ``task``'s env ("" when nothing): a system package, or an
        interpreter that is neither here nor one uv may still install. Nothing is downloaded."""
        missing = missing_system_packages(task.repo)
        if missing:
            return missing
        got = resolve(str(spec.get("python", "3")), cache_dir=self.cache_dir, provision=False, repo=task.repo,
                      version=task.version)
        return "" if got.path or got.provisionable else got.reason

    def _steps(self, path: Path, task: Task, meta: dict[str, Any]) -> _Steps:
        env = build_env(path / "home", path / "venv")
        # The checkout is not a git clone: setuptools_scm (pytest, xarray, astropy) would find no
        # version, or a 0.x that fails the repos' own ``minversion`` checks. An inferred env says
        # the newest tag of its commit.
        if meta.get("scm_version"):
            env["SETUPTOOLS_SCM_PRETEND_VERSION"] = str(meta["scm_version"])
        elif re.fullmatch(r"\d+\.\d+", task.version):
            env["SETUPTOOLS_SCM_PRETEND_VERSION"] = f"{task.version}.0"
        compiled = self.compiled(task, path)
        compiled.apply(env)
        pins = ERA_CONSTRAINTS.get(task.repo, []) + compiled.constraints
        if pins:
            (path / "constraints.txt").write_text("\n".join(pins) + "\n")
            env["PIP_CONSTRAINT"] = str(path / "constraints.txt")  # the spec's own pip commands too
        # Every step (pip from the index, the repository's own setup.py) in a network namespace of its
        # own: the index through fixgraph's proxy, never the host's loopback or network.
        limits = Limits(self.settings.build_timeout_s, int(self.settings.build_timeout_s * 2), 8192,
                        network_isolation=True, index_access=True)
        return _Steps(env, limits, meta, path)

    def compiled(self, task: Task, path: Path) -> CompiledBuild:
        """What a compiled repo's build adds: offline libraries, the shared compiler cache, pins."""
        return compiled_build(task.repo, task.version, path)

    def _build(self, task: Task, wt: Worktree, spec: dict[str, Any], path: Path) -> dict[str, Any]:
        """The venv and the dependencies: the spec's Python, requirements (read at the
        environment_setup_commit, as swebench does), packages and pip_packages."""
        start = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        (path / "home").mkdir()
        meta: dict[str, Any] = {"ok": False, "repo": task.repo, "version": task.version,
                                "wanted_python": spec.get("python"), "build_id": uuid.uuid4().hex[:8]}
        if spec.get("inferred"):  # how it was made, for the record and the PR body
            meta.update(inferred=spec.get("description", ""), scm_version=spec.get("scm_version", ""))
        run = self._steps(path, task, meta)

        def fail(reason: str, retryable: bool = False) -> dict[str, Any]:
            shutil.rmtree(path / "setup", ignore_errors=True)
            meta.update(reason=reason, retryable=retryable, seconds=round(time.monotonic() - start, 1),
                        log_tail=run.tail())
            return meta

        missing = missing_system_packages(task.repo)
        if missing:
            meta["machine_fault"] = True
            return fail(missing)
        got = resolve(str(spec.get("python", "3")), cache_dir=self.cache_dir, repo=task.repo, version=task.version)
        if got.path is None:
            meta["machine_fault"] = True
            return fail(got.reason)
        python, version = got.path, got.python
        meta.update(python=python, python_version=version, python_how=got.how, python_note=got.reason)
        era = str(spec.get("spec_python") or spec.get("python", ""))
        pins = SPEC_ERA_PINS.get(era, []) if version_tuple(era) != version_tuple(version) else []
        if pins:
            constraints = path / "constraints.txt"
            before = constraints.read_text() if constraints.is_file() else ""
            constraints.write_text(before + "\n".join(pins) + "\n")
            run.env["PIP_CONSTRAINT"] = str(constraints)
            meta["era_pins"] = pins
        venv, setup = path / "venv", path / "setup"
        # --copies: tools that resolve the interpreter (tox-current-env) must stay in the venv
        if not run([python, "-m", "venv", "--copies", str(venv)], path, "venv"):
            return fail(f"venv with Python {version} failed: {meta['step_error']}")
        vpy = str(venv / "bin" / "python")
        run([vpy, "-m", "pip", "install", "-q", "--upgrade", pip_requirement(spec), "setuptools<70", "wheel"], path,
            "pip")
        commit = task.environment_setup_commit or task.base_commit
        if materialize(wt, commit, setup):
            shutil.rmtree(setup, ignore_errors=True)
            err = materialize(wt, task.base_commit, setup)
            if err:
                return fail(err)
        pkgs = str(spec.get("packages", "")).strip()
        if pkgs == "requirements.txt":
            reqs = requirements_text(setup, task.repo, requirements_paths(self.cache_dir, task.repo))
            if reqs is None:
                return fail(f"no requirements file of {task.repo} at {commit[:12]}")
            reqs, dropped = without_left_out(task.repo, reqs)
            meta["left_out"] = dropped
            (path / "requirements.txt").write_text(reqs)
            if not run([vpy, "-m", "pip", "install", "-q", "-r", str(path / "requirements.txt")], setup,
                       "requirements"):
                return fail(f"installing the requirements failed: {meta['step_error']}", retryable=run.transient)
        elif pkgs == "environment.yml":
            run.log.append("[fixgraph] environment.yml is conda's; relying on pip_packages (and its test "
                           "packages, scoring.execution.compiled.ENV_YML_TEST_PACKAGES)\n")
        elif pkgs and not run([vpy, "-m", "pip", "install", "-q", *shlex.split(pkgs)], setup, "packages"):
            return fail(f"installing {pkgs} failed: {meta['step_error']}", retryable=run.transient)
        if spec.get("pip_packages") and not run([vpy, "-m", "pip", "install", "-q", *spec["pip_packages"]], setup,
                                                "pip_packages"):
            return fail(f"installing pip_packages failed: {meta['step_error']}", retryable=run.transient)
        shutil.rmtree(setup, ignore_errors=True)
        site = envcheck.listing(venv)
        meta.update(site_build=site, site=site)
        meta.update(ok=True, reason="", seconds=round(time.monotonic() - start, 1), log_tail=run.tail())
        return meta

    def _install(self, task: Task, wt: Worktree, spec: dict[str, Any], path: Path,
                 meta: dict[str, Any]) -> None:
        """The package itself at the instance's base commit (swebench installs it per instance:
        dependencies change between commits), in ``src``; then ``src`` becomes a symlink to it."""
        start = time.monotonic()
        src, base = path / "src", path / "base"
        for left in path.glob(f"{_OLD_TREE_PREFIX}*"):  # by a process that ended before deleting it
            _delete_later(left)
        run = self._steps(path, task, meta)
        if src.is_symlink():
            src.unlink()
        shutil.rmtree(src, ignore_errors=True)
        err = materialize(wt, task.base_commit, src)
        ok = not err
        stand_ins = download_stand_ins(task.repo, src) if ok else []
        if stand_ins:  # env.json says what was not downloaded
            meta["stand_ins"] = stand_ins
        else:
            meta.pop("stand_ins", None)
        before = _file_set(src) if ok else set()
        for sub in _empty_submodules(src) if ok else []:
            if sub in SUBMODULE_PACKAGES:
                run([str(path / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", SUBMODULE_PACKAGES[sub]],
                    src, "submodule")
        compiled = self.compiled(task, path)
        if ok and compiled.compiled:
            meta["reused_generated"] = reuse_generated(base, src)  # Cython's output, where its inputs match
            needs = build_requires(src)
            # The same requirements as at the last install, into a venv whose site-packages is as that
            # install left it (get() rebuilds one that changed): pip would find each satisfied.
            if needs and needs != meta.get("build_requires"):
                if run([str(path / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", *needs], src,
                       "build_requires"):
                    meta["build_requires"] = needs
                else:
                    ok, err = False, f"installing the build requirements {needs} failed: {meta['step_error']}"
        for cmd in compiled.pre_install(list(spec.get("pre_install", []))) if ok else []:
            run(["bash", "-c", cmd], src, "pre_install")
        install = compiled.install(str(spec.get("install", ""))) if spec.get("install") else None
        if ok and install and not run(["bash", "-c", install], src, "install"):
            where = f" of {spec['how']['install']}" if "fixgraph" in str(spec.get("how", {}).get("install")) else ""
            ok, err = False, f"install step{where} failed ({install}): {meta['step_error']}"
            # An old pinned build backend (pylint's setuptools~=62.6) has no PEP 660 hook; swebench's
            # older pip fell back to ``setup.py develop``. Build with the venv's setuptools instead.
            retry = install.replace("pip install ", "pip install --no-build-isolation ", 1)
            if retry != install and run(["bash", "-c", retry], src, "install"):
                ok, err = True, ""
        venv = path / "venv"
        if ok and not ((venv / "bin" / "python").is_file() and src.is_dir() and not src.is_symlink()):
            ok, err = False, "the install step removed the env's interpreter or its own checkout"
        planted = envcheck.planted(meta.get("site_build", {}), envcheck.listing(venv))
        if planted:
            # Python would run them in every later task's processes: removed, and the install refused.
            for key in planted:
                _remove_entry(venv, key)
            if ok:
                ok, err = False, f"the install step left {', '.join(planted)} in the shared env: refused and removed"
        meta["site"] = envcheck.listing(venv)
        if not ok:
            meta["failed_installs"][task.base_commit] = f"at {task.base_commit[:12]}: {err}"
            if not run.transient:  # a compiler error, a download from outside, a timeout: final
                meta["install_tries"][task.base_commit] = INSTALL_TRIES
            meta["failed_install_log_tail"] = run.tail()
            if src.is_symlink():
                src.unlink()
            shutil.rmtree(src, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)  # an install step may have removed it all
            _link_source(path)
            return
        meta.update(artifacts=sorted(_file_set(src) - before), installed_commit=task.base_commit, serves=[],
                    install_seconds=round(time.monotonic() - start, 1), install_log_tail=run.tail())
        if compiled.compiled and str(path / LINK_BIN_SUBDIR) in compiled.path_prefix:
            meta["link_cache"] = LINK_CACHE_VERSION
        else:
            meta.pop("link_cache", None)
        if base.is_symlink():
            base.unlink()
        elif base.exists():
            _delete_later(base)
        os.rename(src, base)
        _link_source(path)


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def without_left_out(repo: str, reqs: str) -> tuple[str, dict[str, str]]:
    """``reqs`` without the requirements :data:`LEFT_OUT` names for ``repo``, and those left out
    with their reasons (recorded in the env's ``env.json``)."""
    table = {k.lower(): v for k, v in LEFT_OUT.get(repo, {}).items()}
    kept: list[str] = []
    dropped: dict[str, str] = {}
    for line in reqs.splitlines():
        m = _REQ_NAME.match(line)
        name = m.group(1).lower().replace("_", "-") if m else ""
        if name in table:
            dropped[name] = table[name]
        else:
            kept.append(line)
    return "\n".join(kept) + "\n", dropped


class _Steps:
    """Runs build steps in the build environment, keeping a log and the first failure."""

    def __init__(self, env: dict[str, str], limits: Limits, meta: dict[str, Any], root: Path):
        self.env, self.limits, self.meta = env, limits, meta
        self.root = root  # the environment's folder: the build writes its venv (and compiler cache) there
        self.log: list[str] = []
        self.transient = True  # whether the last failure may pass on a retry

    def __call__(self, argv: list[str], cwd: Path, what: str) -> bool:
        done = run_isolated(argv, cwd, self.env, self.limits, writable=(self.root,))
        self.log.append(f"$ {' '.join(argv)}\n{done.output[-20000:]}\n")
        if done.returncode != 0:
            tail = [ln for ln in done.output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
            failure = classify_failure(done.output, done.timed_out, self.limits.timeout_s)
            self.meta["failed_step"] = what
            self.meta["failure_kind"] = failure.kind
            self.meta["step_error"] = failure.reason or tail[0][:300]
            self.transient = failure.transient or failure.kind == "other"
            return False
        return True

    def tail(self) -> str:
        return "".join(self.log)[-4000:]


# What a build that failed for the machine's lack said, in records written before they carried
# ``machine_fault``.
_MACHINE_REASON = re.compile(r"^(needs Python \d|building offline needs Debian's )")


def env_record(path: Path) -> dict[str, Any] | None:
    """The env's ``env.json`` at ``path``: None when it has none, or one a kill left unreadable."""
    try:
        meta = json.loads((path / "env.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def machine_fault(meta: dict[str, Any] | None) -> bool:
    """The failed build stopped before any step, on what the machine lacks (an interpreter, a system
    package): not final, since the reason names the one command that removes it."""
    return bool(meta and not meta.get("ok")
                and (meta.get("machine_fault") or _MACHINE_REASON.match(str(meta.get("reason", "")))))


def _tainted(path: Path, meta: dict[str, Any] | None) -> str:
    """Why the built env at ``path`` cannot be used as it is ("" when it can): its interpreter is
    gone, or site-packages' top level is not what the last build or install left."""
    if not meta or not meta.get("ok"):
        return ""
    venv = path / "venv"
    if not (venv / "bin" / "python").is_file():
        return "its interpreter is gone"
    recorded = meta.get("site")
    if recorded is None:
        return ""  # built before this check existed
    diff = envcheck.changed(recorded, envcheck.listing(venv))
    return f"site-packages changed after its last install: {', '.join(diff[:5])}" if diff else ""


def _remove_entry(venv: Path, key: str) -> None:
    target = venv / key
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)


def _editable(install: str) -> bool:
    """An install that leaves the code where it is (``pip install -e``, ``setup.py develop``): only then
    can a run's own copy stand in for it. ``pip install .`` (requests) copies the code at its commit."""
    words = install.split()
    return "-e" in words or "--editable" in words or "develop" in words


# Every env lookup of a task asks again (each test run, each base-run key): the answer is one of two
# commits' contents, kept for the process. A comparison that failed is asked again next time.
_COMPARED: dict[tuple[str, str, tuple[str, ...]], str] = {}
_COMPARED_LOCK = threading.Lock()


def install_differs(wt: Worktree, old: str, new: str, artifacts: list[str]) -> str:
    """Why an install at ``old`` would not be the install at ``new`` ("" when it would): a changed
    build file or compiled source, a module added or removed at the top of the package's tree (an
    editable install maps top-level names), or any change in a folder where the install generated
    code (astropy's ``_erfa/core.py`` comes from templates beside it). Unknown is different."""
    key = (old, new, tuple(artifacts))
    with _COMPARED_LOCK:
        if key in _COMPARED:
            return _COMPARED[key]
    why, known = _install_differs(wt, old, new, artifacts)
    if known:
        with _COMPARED_LOCK:
            _COMPARED[key] = why
    return why


def _install_differs(wt: Worktree, old: str, new: str, artifacts: list[str]) -> tuple[str, bool]:
    """:func:`install_differs`'s answer, and whether git gave one (False: the comparison failed)."""
    try:
        proc = subprocess.run(["git", "-C", str(wt.path), "diff", "--no-renames", "--name-status", old, new, "--"],
                              capture_output=True, env=gitsafe.hardened_env(), timeout=120)
    except subprocess.TimeoutExpired:
        return f"comparing {old[:12]} with {new[:12]} timed out", False
    if proc.returncode != 0:
        return f"cannot compare {old[:12]} with {new[:12]}", False
    generated = {os.path.dirname(a) for a in artifacts if not _METADATA_ARTIFACT.search(a)}
    for line in proc.stdout.decode(errors="replace").splitlines():
        status, _, name = line.partition("\t")
        if _INSTALL_INPUT.search(name) and not _setup_change_is_inert(wt, old, new, name):
            return f"{name} changed", True
        parts = name.split("/")[1:] if name.startswith("src/") else name.split("/")
        top = (len(parts) == 1 and name.endswith(".py")) or (len(parts) == 2 and parts[1] == "__init__.py")
        if status[:1] in "AD" and top:
            return f"{name} {'added' if status[:1] == 'A' else 'removed'} at the top", True
        if os.path.dirname(name) in generated:
            return f"{name} changed beside generated code", True
    return "", True


def _setup_change_is_inert(wt: Worktree, old: str, new: str, name: str) -> bool:
    """Whether a change to a build file cannot change an editable install: a setup.py whose changed
    lines only list package names (sympy's setup.py lists every subpackage), a setup.cfg whose
    changed sections configure tools (``[tool:pytest]``, ``[flake8]``)."""
    before, after = wt.show(old, name), wt.show(new, name)
    if before is None or after is None:
        return False  # added or removed
    if name == "setup.py" or name.endswith("/setup.py"):
        changed = set(before.splitlines()) ^ set(after.splitlines())
        return all(_LISTED_NAME.match(line) for line in changed)
    if name == "setup.cfg" or name.endswith("/setup.cfg"):
        parsed = []
        for text in (before, after):
            cfg = configparser.RawConfigParser(strict=False, interpolation=None)
            try:
                cfg.read_string(text)
            except configparser.Error:
                return False
            parsed.append({sec: dict(cfg.items(sec)) for sec in cfg.sections() if not _TOOL_SECTION.match(sec)})
        return parsed[0] == parsed[1]
    return False


# The previous install's checkout, renamed out of the way and deleted by a thread.
_OLD_TREE_PREFIX = ".old-tree-"


def _delete_later(tree: Path) -> None:
    """``tree`` renamed at once to a name no one reads and deleted by a thread: deleting a checkout
    of thousands of files that has reached the disk waits seconds on it (6-13 s for matplotlib's
    here, 0.1 s of CPU), which the install need not wait for. What a process that ended first left
    is deleted at the env's next install."""
    if not tree.name.startswith(_OLD_TREE_PREFIX):
        old = tree.with_name(f"{_OLD_TREE_PREFIX}{uuid.uuid4().hex[:8]}")
        os.rename(tree, old)
        tree = old
    threading.Thread(target=shutil.rmtree, args=(tree,), kwargs={"ignore_errors": True}, daemon=True).start()


def _link_source(path: Path) -> None:
    """``src`` (where the package was installed) a symlink to the installed checkout ``base``."""
    src, base = path / "src", path / "base"
    if not src.is_symlink():
        src.symlink_to(base)


def _repoint(link: Path, target: Path) -> None:
    tmp = link.with_name(".src-next")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)  # atomic: a reader sees the old target or the new one


@contextmanager
def _pointed_at(path: Path, work: Path, can_bind: bool) -> Iterator[list[tuple[Path, Path]]]:
    """For one run, the installed package's source path leads to ``work``; yields the mounts the
    run needs for it. In a sandbox, the run's own mount namespace binds ``work`` over the installed
    checkout: runs on one env proceed side by side (a shared lock keeps a reinstall out). Without
    one, the ``src`` link itself is repointed, and runs on the env queue."""
    lock = path.parent / f"{path.name}.run.lock"
    if can_bind:
        with file_lock(lock, shared=True):
            yield [(work, path / "base")]
        return
    with file_lock(lock):
        _repoint(path / "src", work)
        try:
            yield []
        finally:
            _repoint(path / "src", path / "base")


def _empty_submodules(root: Path) -> list[str]:
    try:
        text = nofollow.read_bytes(root, ".gitmodules", 1_000_000).decode(errors="replace")
    except OSError:
        return []
    paths = re.findall(r"^\s*path\s*=\s*(\S+)", text, flags=re.M)
    return [p for p in paths if not (root / p).is_dir() or not any((root / p).iterdir())]


def _file_set(root: Path) -> set[str]:
    """The regular files under ``root`` (no link: an artifact is copied as fixgraph, and a link
    would copy whatever it leads to), without compiled objects and build folders."""
    return {rel for rel in nofollow.regular_files(root, frozenset(_SKIP_ARTIFACT_DIRS), _MAX_ARTIFACT_BYTES)
            if not rel.endswith((".pyc", ".o"))}
