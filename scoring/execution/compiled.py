"""Builds of repositories that compile code (matplotlib, scikit-learn): offline, cached, explained.

Offline: swebench's specs fetch matplotlib's freetype and qhull from their sites during the build
(``wget`` in ``pre_install``, or ``setupext.py``'s own download); nothing but the package registries
is reachable here, so every matplotlib version is told to use Debian's ``libfreetype-dev`` and
``libqhull-dev`` (``[libs] system_freetype/system_qhull`` in a config file named by ``MPLSETUPCFG``,
which setupext.py reads from 3.3 on, ``setup.cfg`` syntax before 3.5 and ``mplsetup.cfg`` after, the
same section; before 3.3 the build takes Debian's FreeType by default and compiles its own copy of
Qhull, and 3.0's download of jQuery UI is skipped by :func:`download_stand_ins`). scikit-learn's old versions build with the spec's Python 3.6 and pins; ``cython`` is
held below 3 for 0.20-0.22 (conda's Python 3.6 builds, which the harness's images used, never had
Cython 3, which these versions' ``.pyx`` files do not compile with).

Cheap after the first: the C/C++ compiler runs through ``ccache`` with one cache per env
(``<env>/ccache``), so a later base commit of the same (repo, version) recompiles only the
translation units whose preprocessed source changed. The install itself still runs at each commit in
the env's own checkout, so a run imports that commit's code and extensions built from its sources;
ccache only answers "this exact input compiled before" with the object it produced. Builds that
would fetch into a temporary build environment (pip's build isolation) are made in the venv instead,
so the compiler sees the same paths at every commit.

Failures are told apart (:func:`classify_failure`): a download outside the package registries never
succeeds here (final), a connection to the index that dropped may (one retry), a compiler error is
that commit's alone, a timeout leaves nothing half-built behind.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scoring.execution import cython_cache, linkcache

# (repo, version) -> pins for every pip command of the build, the spec's own included.
COMPILED_CONSTRAINTS: dict[tuple[str, str], list[str]] = {
    ("scikit-learn/scikit-learn", v): ["cython<3"] for v in ("0.20", "0.21", "0.22")
}
# What the spec's conda environment.yml gives the harness's image that its pip_packages do not: the
# test runner and the test suite's own imports (matplotlib 3.5-3.7: pytest is in environment.yml only).
ENV_YML_TEST_PACKAGES: dict[str, list[str]] = {
    "matplotlib/matplotlib": ["pytest<8", "pytest-rerunfailures", "pytest-timeout", "pytest-xdist", "ipython",
                              "nbformat", "pandas<2.3", "psutil", "pytz", "tornado"],
}
COMPILED_REPOS = frozenset({"matplotlib/matplotlib", "scikit-learn/scikit-learn"})
# A spec's pins that PyPI has no wheel of for the spec's Python (conda's channels, which the harness's
# images use, have one), and the nearest version that has: scikit-learn 1.3 runs on Python 3.9, and
# numpy 1.19.2 and scipy 1.5.2 have no cp39 wheel (numpy 1.19.3 and scipy 1.5.4 are the first that
# do; numpy 1.19's sdist does not build on 3.9 without a compile of its own of minutes).
WHEEL_PINS: dict[tuple[str, str], dict[str, str]] = {
    ("scikit-learn/scikit-learn", "1.3"): {"numpy==1.19.2": "numpy==1.19.3", "scipy==1.5.2": "scipy==1.5.4"},
}

# What setupext.py reads from MPLSETUPCFG: the Debian libraries instead of downloaded sources.
MPL_SETUP_CFG = "[libs]\nsystem_freetype = true\nsystem_qhull = true\n"
# matplotlib 3.0's setup.py fetches jQuery UI from jqueryui.com (no package registry) in its develop
# step, unless the folder it unpacks to is there already. Only the webagg backend's HTML pages load it,
# in a browser; no code or test of the package reads it. An empty folder of that name stands in.
_JQUERY_UI_ZIP = re.compile(r"jquery-ui-(\d+(?:\.\d+)+)\.zip")
JQUERY_UI_HOME = "lib/matplotlib/backends/web_backend"
# swebench's pre_install steps that download or need root (apt-get): the build does neither.
_SKIPPED_PRE_INSTALL = re.compile(r"^\s*(apt-get|apt|wget|curl|tar\s|mkdir -p \"\$QHULL|QHULL_\w+=)")
CCACHE_SUBDIR = "ccache"
# Debian's ccache package: gcc, g++, cc, c++ there are ccache under the compilers' names.
CCACHE_COMPILERS = "/usr/lib/ccache"
CCACHE_MAX_SIZE = "2G"
# Each cache's stats log, per env, in the env's folder (eval.build_bench counts and clears them).
CCACHE_STATS_LOG, LINK_STATS_LOG, CYTHON_STATS_LOG = "ccache.statslog", "linkcache.statslog", "cython.statslog"
# The link cache (linkcache.py): its wrappers and its entries, in the env's folder. LINK_CACHE_VERSION
# is recorded with each install made through it (env.json's ``link_cache``, part of the env's key).
LINK_BIN_SUBDIR = "linkbin"
LINK_CACHE_SUBDIR = "linkcache"
LINK_CACHE_VERSION = linkcache.VERSION
# Cython's own cache of generated C (cython_cache.py, the install's sitecustomize): scikit-learn only,
# the one compiled repo that runs Cython.
CYTHON_HOOK_SUBDIR = "cyhook"
CYTHON_CACHE_SUBDIR = "cycache"
CYTHON_REPOS = frozenset({"scikit-learn/scikit-learn"})
# ccache looks for the real compiler on PATH after itself: without this folder on it (it would
# find the wrapper again).
_LINK_WRAPPER = """#!/bin/sh
# fixgraph: a compile goes to ccache; a link to the link cache (scoring/execution/linkcache.py)
PATH=${{PATH#{folder}:}}
export PATH
for a in "$@"; do
  case "$a" in -c|-S|-E|-M|-MM) exec {ccache} "$@";; esac
done
[ -x {python} ] || exec {ccache} "$@"
exec {python} -I -S {script} {name} "$@"
"""

# A build that reached for something outside the package registries: never succeeds here.
_OFFLINE_DOWNLOAD = re.compile(r"Tunnel connection failed: 403|asked for more than the package index|"
                               r"Failed to download any of the following|get_and_extract_tarball|"
                               r"(wget|curl): .*(unable to resolve|Could not resolve|Failed to connect)|"
                               r"urllib\.error\.URLError|downloading .*(freetype|qhull)", re.I)
# A connection to the package index that failed: may succeed on a retry.
_TRANSIENT_NETWORK = re.compile(r"ReadTimeoutError|Connection (reset|aborted|refused)|"
                                r"Failed to establish a new connection|Temporary failure in name resolution|"
                                r"Max retries exceeded|HTTP error 5\d\d|IncompleteRead|ProtocolError", re.I)
_COMPILER_ERROR = re.compile(r"error: command '.*(gcc|g\+\+|cc|c\+\+|clang)' failed|"
                             r"^\S+\.(c|cc|cpp|cxx|h|hpp):\d+(:\d+)?: (fatal )?error:|Cython\.Compiler\.Errors|"
                             r"Error compiling Cython file", re.M)


@dataclass(frozen=True)
class Failure:
    """Why a build step failed, in one line, and whether trying again may help."""

    kind: str  # "network", "offline-download", "compiler", "timeout", "other"
    reason: str
    transient: bool


def classify_failure(log: str, timed_out: bool, timeout_s: float) -> Failure:
    """The kind of a failed build step from its output."""
    if timed_out:
        return Failure("timeout", f"the build was stopped by its timeout ({timeout_s:.0f} s); nothing of it is kept",
                       transient=False)
    m = _OFFLINE_DOWNLOAD.search(log)
    if m:
        return Failure("offline-download", "the build needs the network beyond the package registries "
                       f"({m.group(0)[:120]}); it cannot build offline", transient=False)
    m = _TRANSIENT_NETWORK.search(log)
    if m:
        return Failure("network", f"the package index could not be reached ({m.group(0)[:120]})", transient=True)
    m = _COMPILER_ERROR.search(log)
    if m:
        return Failure("compiler", f"the compiler failed at this commit: {m.group(0).strip()[:200]}", transient=False)
    return Failure("other", "", transient=False)


@dataclass
class CompiledBuild:
    """What the build of one (repo, version) adds to the plain venv build."""

    env: dict[str, str] = field(default_factory=dict)
    constraints: list[str] = field(default_factory=list)
    compiled: bool = False
    path_prefix: list[str] = field(default_factory=list)  # before the build's PATH

    def apply(self, env: dict[str, str]) -> None:
        """This build's settings in a build step's environment."""
        env.update(self.env)
        if self.path_prefix:
            env["PATH"] = ":".join([*self.path_prefix, env.get("PATH", "")])

    def pre_install(self, steps: list[str]) -> list[str]:
        """The spec's pre_install steps the build runs: for a compiled repo, none that download or apt-get."""
        return offline_pre_install(steps) if self.compiled else steps

    def install(self, install: str) -> str:
        """The spec's install command; for a compiled repo built in the venv, not in an isolated one."""
        if self.compiled and "pip install " in install and "--no-build-isolation" not in install:
            return install.replace("pip install ", "pip install --no-build-isolation ", 1)
        return install


# Debian packages a compiled repo's offline build needs: (pkg-config module, package). ccache is
# optional (without it every install compiles everything).
SYSTEM_LIBRARIES: dict[str, list[tuple[str, str]]] = {
    "matplotlib/matplotlib": [("freetype2", "libfreetype-dev"), ("qhull_r", "libqhull-dev")],
}


def missing_system_packages(repo: str) -> str:
    """Why this machine cannot build ``repo`` offline ("" when it can): the Debian packages to install."""
    needed = SYSTEM_LIBRARIES.get(repo, [])
    if not needed:
        return ""
    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        return ("building offline needs Debian's pkg-config and " + ", ".join(p for _, p in needed)
                + ": apt-get install pkg-config " + " ".join(p for _, p in needed))
    missing = [pkg for mod, pkg in needed
               if subprocess.run([pkg_config, "--exists", mod], capture_output=True, timeout=30).returncode != 0]
    return f"building offline needs Debian's {', '.join(missing)}: apt-get install {' '.join(missing)}" if missing else ""


# Build requirements the venv's own pins stand for: the build compiles against the venv's numpy.
_PINNED_BY_SPEC = re.compile(r"^(oldest-supported-numpy|numpy|setuptools|wheel)\b", re.I)


def build_requires(checkout: Path) -> list[str]:
    """``[build-system] requires`` of the checkout's pyproject.toml, less what the spec pins: with
    build isolation off (see :meth:`CompiledBuild.install`) they must be in the venv (matplotlib
    3.7's pybind11)."""
    import tomllib

    try:
        data = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    requires = data.get("build-system", {}).get("requires", [])
    return [r for r in requires if isinstance(r, str) and not _PINNED_BY_SPEC.match(r.strip())]


def with_wheel_pins(repo: str, version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with :data:`WHEEL_PINS`' versions in its ``packages`` and ``pip_packages``."""
    swap = WHEEL_PINS.get((repo, version))
    if not swap:
        return spec
    packages = spec.get("packages", "")
    out = dict(spec)
    if isinstance(packages, str) and packages not in ("requirements.txt", "environment.yml"):
        out["packages"] = " ".join(shlex.quote(swap.get(p, p)) for p in shlex.split(packages))
    out["pip_packages"] = [swap.get(p, p) for p in spec.get("pip_packages") or []]
    return out


def download_stand_ins(repo: str, checkout: Path) -> list[str]:
    """The folders made in ``checkout`` (relative paths) that its build would otherwise download
    from outside the package registries: matplotlib's jQuery UI where setup.py fetches it."""
    if repo != "matplotlib/matplotlib":
        return []
    try:
        setup = (checkout / "setup.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    m = _JQUERY_UI_ZIP.search(setup)
    if m is None or "_download_jquery_to" not in setup:
        return []
    folder = f"{JQUERY_UI_HOME}/jquery-ui-{m.group(1)}"
    (checkout / folder).mkdir(parents=True, exist_ok=True)
    return [folder]


def offline_pre_install(steps: list[str]) -> list[str]:
    """swebench's pre_install steps without those that download or apt-get."""
    return [s for s in steps if not _SKIPPED_PRE_INSTALL.match(s)]


def is_compiled(repo: str) -> bool:
    return repo in COMPILED_REPOS


def compiled_build(repo: str, version: str, env_dir: Path) -> CompiledBuild:
    """The compiled-repo settings of ``repo`` at ``version`` (empty for a pure-Python repo)."""
    constraints = list(COMPILED_CONSTRAINTS.get((repo, version), []))
    if repo not in COMPILED_REPOS:
        return CompiledBuild(constraints=constraints)
    env: dict[str, str] = {}
    path_prefix: list[str] = []
    if shutil.which("ccache") and Path(CCACHE_COMPILERS, "gcc").exists():
        # ccache's compiler names first on PATH, not CC="ccache gcc": distutils links C++ with CXX's
        # first word (``ccache -shared ...`` fails), and numpy.distutils does the same.
        # The link cache's wrappers before them: a compile goes on to ccache, a link to linkcache.py.
        path_prefix += [str(link_wrappers(env_dir)), CCACHE_COMPILERS]
        # One cache per env, in the env's folder: later commits of the same (repo, version) are what
        # it serves; a cache shared by envs would be handed between the sandbox's user and ours by
        # each build's end, under another build still writing to it.
        env.update(CCACHE_DIR=str(env_dir / CCACHE_SUBDIR), CCACHE_BASEDIR=str(env_dir),
                   CCACHE_NOHASHDIR="true", CCACHE_MAXSIZE=CCACHE_MAX_SIZE,
                   CCACHE_SLOPPINESS="time_macros,include_file_mtime,include_file_ctime",
                   CCACHE_STATSLOG=str(env_dir / CCACHE_STATS_LOG),
                   FIXGRAPH_LINK_CACHE=str(env_dir / LINK_CACHE_SUBDIR),
                   FIXGRAPH_LINK_STATSLOG=str(env_dir / LINK_STATS_LOG))
    if repo in CYTHON_REPOS:
        # The install's Python processes find cython_cache.py first (PYTHONPATH, build steps only;
        # test runs never see it): cythonize() gets the env's cache of generated C.
        env.update(PYTHONPATH=str(cython_hook(env_dir)), FIXGRAPH_CYTHON_CACHE=str(env_dir / CYTHON_CACHE_SUBDIR),
                   FIXGRAPH_CYTHON_STATSLOG=str(env_dir / CYTHON_STATS_LOG))
    if repo == "matplotlib/matplotlib":
        env_dir.mkdir(parents=True, exist_ok=True)  # without ccache nothing above made it
        cfg = env_dir / "mplsetup.cfg"
        cfg.write_text(MPL_SETUP_CFG)
        env["MPLSETUPCFG"] = str(cfg)
    return CompiledBuild(env=env, constraints=constraints, compiled=True, path_prefix=path_prefix)


def link_wrappers(env_dir: Path) -> Path:
    """The folder of the link cache's compiler wrappers in ``env_dir`` (written when missing or
    different): one per compiler name of Debian's ccache folder, run with the env's own Python."""
    folder = env_dir / LINK_BIN_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "linkcache.py"
    _write_if_changed(script, Path(linkcache.__file__).read_text(encoding="utf-8"), 0o644)
    python = env_dir / "venv" / "bin" / "python"
    for name in sorted(os.listdir(CCACHE_COMPILERS)):
        text = _LINK_WRAPPER.format(ccache=shlex.quote(f"{CCACHE_COMPILERS}/{name}"), python=shlex.quote(str(python)),
                                    script=shlex.quote(str(script)), name=shlex.quote(name),
                                    folder=shlex.quote(str(folder)))
        _write_if_changed(folder / name, text, 0o755)
    return folder


def cython_hook(env_dir: Path) -> Path:
    """The folder of the Cython cache's ``sitecustomize.py`` in ``env_dir`` (written when missing or
    different, so an install step that edited it is undone before the next build step)."""
    folder = env_dir / CYTHON_HOOK_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    _write_if_changed(folder / "sitecustomize.py", Path(cython_cache.__file__).read_text(encoding="utf-8"), 0o644)
    return folder


def _write_if_changed(path: Path, text: str, mode: int) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        tmp = path.with_name(f".{path.name}.new")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(mode)
        os.replace(tmp, path)


# Cython's inputs besides a .pyx: what it cimports and includes, and the build helpers that set its
# directives. A generated file is reused only when all of them are the same bytes at both commits.
_CYTHON_SHARED = re.compile(r"\.(pxd|pxi)(\.tp)?$|(^|/)_build_utils/")
_CYTHON_SKIP_DIRS = {".git", "build", "__pycache__", ".eggs"}


def _cython_files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _CYTHON_SKIP_DIRS]
        for name in filenames:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = full
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def reuse_generated(old: Path, new: Path) -> int:
    """Copy into the fresh checkout ``new`` what Cython and the templates generated in the previous
    install ``old`` where their inputs are the same bytes: ``X.tp`` -> ``X``, ``X.pyx`` -> ``X.c`` or
    ``X.cpp``, each dated after its input so the build skips it (Cython and sklearn's template step
    compare dates). Only when every ``.pxd``/``.pxi`` (and template of one) and the build helpers
    (``_build_utils``) are the same at both commits; the rest is generated as usual. How many files."""
    if not old.is_dir():
        return 0
    old_files, new_files = _cython_files(old), _cython_files(new)
    shared_new = {r for r in new_files if _CYTHON_SHARED.search(r)}
    # shared files of the old checkout that no template of the new one generates must be the same too
    shared_old = {r for r in old_files if _CYTHON_SHARED.search(r) and r + ".tp" not in new_files}
    if any(r not in old_files or not _same(old_files[r], new_files[r]) for r in shared_new):
        return 0
    if any(r not in new_files for r in shared_old):
        return 0
    later = time.time() + 2
    copied = 0

    def take(rel_in: str, rel_out: str) -> None:
        nonlocal copied
        src, dst = old / rel_out, new / rel_out
        if src.is_file() and not dst.exists() and _same(old / rel_in, new / rel_in):
            shutil.copyfile(src, dst)
            os.utime(dst, (later, later))
            copied += 1

    for rel in sorted(r for r in new_files if r.endswith(".tp")):
        take(rel, rel[:-3])
    for pyx in sorted(str(p.relative_to(new)) for p in new.rglob("*.pyx")):
        for ext in (".c", ".cpp"):
            take(pyx, pyx[:-4] + ext)
    return copied
