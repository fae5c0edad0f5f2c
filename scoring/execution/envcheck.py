"""A shared environment's integrity: what one task's install step may not leave for another task.

A venv per (repo, version) is shared by every task of that version; each task's install step runs
in it (sandboxed, but with the env folder writable). Python runs ``sitecustomize``,
``usercustomize`` and every ``import`` line of a ``.pth`` file in site-packages at the start of
every process: one install step that plants one changes every later task's test runs. So:

- :func:`listing` is a cheap picture of site-packages' top level: every entry's name and kind, the
  content hash of each ``.pth`` and ``*customize`` file. It is recorded after the build
  (``site_build``) and after each install (``site``).
- :func:`planted` says what an install step left that no install may: a ``sitecustomize`` or
  ``usercustomize`` that was not there after the build, or a ``.pth`` file, new or changed since
  the build, with an ``import`` line (an editable install's own finder line excepted, and
  setuptools' namespace-package template rooted in the env's folder).
- Before each run the env's listing must still be the one recorded (:func:`changed`); anything
  else changed it outside fixgraph's install, and the env is rebuilt.

fixgraph's own ``sitecustomize``, the line tracer (``scoring.runtime.line_trace_site``), is never
seen here: it is laid in each test run's folder, outside the env, and put first on that run's
``PYTHONPATH``, while these checks list the env's site-packages, so they catch a plant with or
without it.

It looks at the top level only (a package's own files could still be edited by an install step
of the same repository); that is the price of a check that costs milliseconds per run.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

CUSTOMIZE = ("sitecustomize", "usercustomize")
# A .pth line that setuptools' editable install (PEP 660) writes: it imports its own finder.
_EDITABLE_FINDER = re.compile(r"^import (__editable___[\w.-]+_finder); \1\.install\([^;]*\)$")
_MAX_READ = 1_000_000
# setuptools' namespace-package .pth (``namespaces.py``'s ``_nspkg_tmpl``, with or without the
# ``has_mfs`` guard of setuptools before 60), one line per namespace
# package: matplotlib before 3.7 installs ``matplotlib-nspkg.pth`` for ``mpl_toolkits``. Its code is
# fixed; only the package names and the root vary. The root is the site dir, or in a develop
# install a path literal, which must lie inside the env's own folder (:func:`_runs_code`).
_NAME = r"'[A-Za-z_][\w.]*'"
_NSPKG = re.compile(
    r"^import sys, types, os;(?:has_mfs = sys\.version_info > \(3, 5\);)?"
    r"p = os\.path\.join\((?P<root>sys\._getframe\(1\)\.f_locals\['sitedir'\]|'[^'\\]+'), "
    rf"\*\((?:{_NAME}, )*{_NAME},?\)\);"
    r"importlib = (?:has_mfs and )?__import__\('importlib\.util'\);(?:has_mfs and )?__import__\('importlib\.machinery'\);"
    rf"m = (?:has_mfs and )?sys\.modules\.setdefault\({_NAME}, importlib\.util\.module_from_spec\("
    rf"importlib\.machinery\.PathFinder\.find_spec\({_NAME}, \[os\.path\.dirname\(p\)\]\)\)\);"
    rf"m = m or sys\.modules\.setdefault\({_NAME}, types\.ModuleType\({_NAME}\)\);"
    r"mp = \(m or \[\]\) and m\.__dict__\.setdefault\('__path__',\[\]\);\(p not in mp\) and mp\.append\(p\)"
    rf"(?:;m and setattr\(sys\.modules\[{_NAME}\], {_NAME}, m\))?$")


def site_dirs(venv: Path) -> list[Path]:
    return sorted(p for p in venv.glob("lib/python*/site-packages") if p.is_dir() and not p.is_symlink())


def _digest(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as fh:
        return hashlib.sha256(fh.read(_MAX_READ)).hexdigest()[:16]


def _nspkg(line: str, home: str) -> bool:
    """A line of setuptools' namespace-package template whose root is the site dir or a path in
    the env's folder ``home``."""
    m = _NSPKG.match(line)
    if m is None:
        return False
    root = m.group("root")
    if not root.startswith("'"):
        return True
    real = os.path.realpath(root.strip("'"))
    return real.startswith(os.path.realpath(home) + os.sep)


def _runs_code(path: str, home: str = "") -> bool:
    """Whether a ``.pth`` file has a line Python executes (one that starts with ``import``) other
    than an editable install's finder or setuptools' namespace-package template rooted in ``home``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return True
    with os.fdopen(fd, "rb") as fh:
        lines = fh.read(_MAX_READ).decode(errors="replace").splitlines()
    return any(ln.startswith(("import ", "import\t")) and not _EDITABLE_FINDER.match(ln.strip())
               and not (home and _nspkg(ln.strip(), home)) for ln in lines)


def listing(venv: Path) -> dict[str, str]:
    """site-packages' top level: ``"<site dir>/<name>" -> kind`` (``d``, ``l:<target>``, ``f``,
    and for ``.pth`` and ``*customize`` files ``f:<hash>`` plus ``:code`` when a ``.pth`` runs code)."""
    out: dict[str, str] = {}
    for site in site_dirs(venv):
        prefix = site.relative_to(venv).as_posix()
        for entry in os.scandir(site):
            key = f"{prefix}/{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out[key] = "l:" + os.readlink(entry.path)
            elif stat.S_ISDIR(st.st_mode):
                out[key] = "d"
            elif entry.name.endswith(".pth"):
                out[key] = f"f:{_digest(entry.path)}" + (":code" if _runs_code(entry.path, str(venv.parent)) else "")
            elif entry.name.split(".")[0] in CUSTOMIZE:
                out[key] = f"f:{_digest(entry.path)}"
            else:
                out[key] = "f"
    return out


def planted(build: dict[str, str], now: dict[str, str]) -> list[str]:
    """Entries of ``now`` that no install step may leave, given the listing after the build."""
    found = []
    for key, kind in sorted(now.items()):
        name = key.rsplit("/", 1)[-1]
        if build.get(key) == kind:
            continue
        if name.split(".")[0] in CUSTOMIZE:
            found.append(key)
        elif name.endswith(".pth") and (kind.endswith(":code") or kind.startswith(("l:", "d"))):
            found.append(key)
    return found


def changed(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """Top-level entries added, removed or changed since ``recorded``."""
    return sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
