"""Dependencies a patch adds that the env lacks, installed for the patched run only.

swebench's harness runs the spec's install step again after applying a patch, so a patch that adds
a dependency (pylint-4661's gold patch adds ``appdirs`` to ``setup.cfg``) gets it there. The env
here is built once per (repository, version) and serves every patch; this module closes that gap
for what a patch declares:

- ``install_requires`` in ``setup.cfg``'s ``[options]``, ``dependencies`` in ``pyproject.toml``'s
  ``[project]``, and the lines of a ``requirements*.txt`` at the top of the repository;
- a requirement counts when its project was declared in none of the patch's files before and the
  env does not have it installed;
- each must be a plain requirement (a name, versions, markers): no URL, no option, no file. The
  patch is hostile, so pip gets wheels only (no build code runs), without their own dependencies
  (the env's pins stay as they are), into the run's own folder. That folder goes on the test
  process's ``PYTHONPATH`` after the repository's code; it is no site folder, so no ``.pth`` file
  in a wheel runs.

pip runs as the env's build steps do (:func:`scoring.execution.envs.build_env`, ``run_isolated``
with index access): a scrubbed environment with the user's pip settings but no credential in a URL,
in a sandbox that may write only the run's folder and reaches the package index through fixgraph's
proxy and nothing else. When it cannot install, the run's notes say what was not installed and the
tests run as they are.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from fixgraph.repo.workspace import Worktree
from fixgraph.sandbox import nofollow
from fixgraph.sandbox.process import Limits, run_isolated
from scoring.execution.envs import build_env
from scoring.execution.specs import patch_files

# More than this many new requirements in one patch is no dependency change: nothing is installed.
MAX_ADDED = 10
INSTALL_TIMEOUT_S = 180.0
INSTALL_MEMORY_MB = 4096
_REQUIREMENTS_FILE = re.compile(r"^requirements[\w.-]*\.txt$")
# Run by the env's Python (3.6 and later): the names it has no distribution of.
_MISSING = ("import sys\n"
            "try:\n"
            "    from importlib.metadata import PackageNotFoundError as Absent, version\n"
            "except ImportError:\n"
            "    from pkg_resources import DistributionNotFound as Absent, get_distribution as version\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        version(name)\n"
            "    except Absent:\n"
            "        print(name)\n")


def declares(rel: str) -> bool:
    """Whether ``rel`` is a file whose requirements :func:`declared` reads."""
    return rel in ("setup.cfg", "pyproject.toml") or ("/" not in rel and bool(_REQUIREMENTS_FILE.match(rel)))


def declared(rel: str, text: str) -> list[str]:
    """The requirement strings ``text`` (the file ``rel``) declares; [] when it cannot be read."""
    if rel == "setup.cfg":
        cfg = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            cfg.read_string(text)
        except configparser.Error:
            return []
        raw = cfg.get("options", "install_requires", fallback="")
        return [ln.split("#")[0].strip() for ln in raw.splitlines() if ln.split("#")[0].strip()]
    if rel == "pyproject.toml":
        try:
            deps = tomllib.loads(text).get("project", {}).get("dependencies", [])
        except (tomllib.TOMLDecodeError, AttributeError):
            return []
        return [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
    return [ln.split(" #")[0].strip() for ln in text.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("#", "-"))]


def _plain(raw: str) -> Requirement | None:
    """``raw`` as a requirement with no URL; None otherwise. Its markers are pip's to weigh, with
    the env's Python."""
    try:
        req = Requirement(raw)
    except InvalidRequirement:
        return None
    return None if req.url else req


def added(wt: Worktree, base_commit: str, work: Path, patch: str) -> tuple[list[str], list[str]]:
    """(requirements the patched copy ``work`` declares that the base commit did not, notes): by
    project name, across all the declaring files the patch touches."""
    files = [rel for rel in patch_files(patch) if declares(rel)]
    if not files:
        return [], []
    before: set[str] = set()
    after: dict[str, str] = {}
    notes: list[str] = []
    for rel in files:
        old = wt.show(base_commit, rel)
        for raw in declared(rel, old or ""):
            req = _plain(raw)
            before.add(canonicalize_name(req.name) if req else raw)
        try:
            new = nofollow.read_bytes(work, rel).decode(errors="replace")
        except OSError:
            continue
        for raw in declared(rel, new):
            req = _plain(raw)
            if req is None:
                notes.append(f"the patch declares {raw[:80]!r} in {rel}: not a plain requirement, not installed")
            else:
                after.setdefault(canonicalize_name(req.name), str(req))
    new_reqs = [req for name, req in sorted(after.items()) if name not in before]
    if len(new_reqs) > MAX_ADDED:
        return [], [f"the patch adds {len(new_reqs)} requirements; none installed (at most {MAX_ADDED})"]
    return new_reqs, notes


def missing(python: str, reqs: list[str], env: dict[str, str]) -> list[str]:
    """Those of ``reqs`` whose project the env's ``python`` has not installed (all of them when it
    cannot tell). Only the env's own files are read: the names are validated project names, and
    nothing the patch wrote is on that Python's path (``-I``, from ``/``)."""
    names = {canonicalize_name(Requirement(r).name): r for r in reqs}
    asked = [Requirement(r).name for r in reqs]
    try:
        proc = subprocess.run([python, "-I", "-c", _MISSING, *asked], capture_output=True, text=True,
                              timeout=60, env=env, cwd="/")
    except (OSError, subprocess.TimeoutExpired):
        return reqs
    if proc.returncode != 0:
        return reqs
    absent = {canonicalize_name(ln.strip()) for ln in proc.stdout.splitlines() if ln.strip()}
    return [r for n, r in names.items() if n in absent]


def provide(wt: Worktree, base_commit: str, work: Path, patch: str, python: str,
            target: Path) -> tuple[Path | None, list[str]]:
    """The folder ``target`` holding the dependencies the patch adds (None when there are none to
    give), and the notes of the run that say what was installed or why not. pip's own files (its
    home, its cache) go in a folder beside ``target``, in the run's folder."""
    reqs, notes = added(wt, base_commit, work, patch)
    if not reqs:
        return None, notes
    home = target.parent / "pip-home"
    home.mkdir(exist_ok=True)
    target.mkdir(exist_ok=True)
    env = build_env(home, Path(python).parent.parent)
    reqs = missing(python, reqs, env)
    if not reqs:
        return None, notes
    argv = [python, "-I", "-m", "pip", "install", "-q", "--only-binary", ":all:", "--no-deps", "--no-compile",
            "--target", str(target), *reqs]
    limits = Limits(INSTALL_TIMEOUT_S, int(INSTALL_TIMEOUT_S * 2), INSTALL_MEMORY_MB,
                    network_isolation=True, index_access=True)
    done = run_isolated(argv, home, env, limits, writable=(target,))
    if done.timed_out:
        return None, [*notes, f"the patch adds {', '.join(reqs)}: not installed (pip took over {INSTALL_TIMEOUT_S:g} s)"]
    if done.returncode != 0:
        last = next((ln.strip() for ln in reversed(done.output.splitlines()) if ln.strip()), "pip failed")
        return None, [*notes, f"the patch adds {', '.join(reqs)}: not installed ({last[:200]})"]
    return target, [*notes, f"the patch adds {', '.join(reqs)}: installed for this run (wheels, no dependencies)"]
