"""Which interpreter runs a task's tests: the spec's Python, found or provisioned, or a substitute
measured safe, or none with the one-line reason.

A task's tests agree with the official harness only under the Python its spec names: another minor
can change what the tests print (3.11 renamed unittest's test ids in its output, so a correct patch
of django 4.2 scored 0) or fail before any test runs (``collections.Mapping`` is gone in 3.10). So
the closest version is never taken silently: only the pairs in :data:`SAFE_SUBSTITUTES`, where the
gold patches were run under both and agreed (docs/fresh-machine.md has the table and how it was measured).

Provisioning is uv's managed Pythons (python-build-standalone builds), installed into fixgraph's
cache. uv reads ``UV_PYTHON_INSTALL_MIRROR`` and ``UV_PYTHON_DOWNLOADS_JSON_URL`` from the
environment, so an organisation's mirror works unchanged; uv checks each archive's sha256 and
installs through a temporary folder, so a cut or corrupted download leaves nothing to pick up.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# uv fetches one archive of a few tens of MB; a stalled mirror must not hold a build for ever.
PROVISION_TIMEOUT_S = 900
# The folder of fixgraph's cache that holds uv's managed Pythons.
PYTHONS_DIR = "pythons"

# (repo, version) -> {spec Python: substitutes in order of preference}. A pair is here only when the
# gold patches of that (repo, version) gave the same verdicts under both interpreters (eval.gold_bench
# --python, compared by eval.substitutes; docs/fresh-machine.md has the rows, held-out ones included).
SAFE_SUBSTITUTES: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("django/django", "3.0"): {"3.6": ("3.7", "3.8")},
    ("django/django", "3.1"): {"3.6": ("3.8",)},
    ("django/django", "3.2"): {"3.6": ("3.8",)},
    ("mwaskom/seaborn", "0.12"): {"3.9": ("3.11",)},
    ("pylint-dev/pylint", "2.15"): {"3.9": ("3.11",)},
    ("sphinx-doc/sphinx", "3.4"): {"3.9": ("3.11",)},
    ("sympy/sympy", "1.8"): {"3.9": ("3.11",)},
}

How = Literal["found", "provisioned", "substitute", "missing"]


@dataclass(frozen=True)
class Resolution:
    path: str | None
    python: str  # the X.Y of ``path``; the wanted X.Y when missing
    how: How
    reason: str  # one line; empty when the spec's Python was found
    # When missing only because provisioning was not asked for: uv would likely provide it.
    provisionable: bool = False


def version_tuple(text: str) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _scan(patterns: list[str]) -> dict[tuple[int, int], str]:
    found: dict[tuple[int, int], str] = {}
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            m = re.search(r"python(\d)\.(\d+)$", path)
            if m and os.access(path, os.X_OK):
                found.setdefault((int(m.group(1)), int(m.group(2))), path)
    return found


def managed_pythons(cache_dir: Path) -> dict[tuple[int, int], str]:
    """uv's managed Pythons that fixgraph installed into its cache (only complete installs: uv
    renames a folder into place once it is unpacked)."""
    return _scan([str(cache_dir / PYTHONS_DIR / "cpython-*" / "bin" / "python3.*")])


def system_pythons() -> dict[tuple[int, int], str]:
    """Interpreters installed outside fixgraph: pyenv's, uv's default folder's, and those on PATH."""
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    patterns = [f"{pyenv_root}/versions/*/bin/python3.*",
                os.path.expanduser("~/.local/share/uv/python/*/bin/python3.*")]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and "shims" not in d:  # pyenv's shims resolve per directory; the real binaries are above
            patterns.append(f"{d}/python3.*")
    return _scan(patterns)


def machine_pythons(cache_dir: Path) -> dict[tuple[int, int], str]:
    return {**system_pythons(), **managed_pythons(cache_dir)}


def uv_binary() -> str | None:
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


# A failed download is not retried within one process: every task of a repository would wait on it.
_failed: dict[tuple[str, str], str] = {}
_lock = threading.Lock()
# uv's answer per (minor, downloads list), once per process.
_offered: dict[tuple[str, str], bool] = {}


def uv_offers(xy: str) -> bool:
    """Whether uv has a CPython ``xy`` build to install: its own list (which starts at 3.8), or the
    organisation's (``UV_PYTHON_DOWNLOADS_JSON_URL``). Listing downloads nothing, so ``--check`` can
    say that 3.6 will not come from uv instead of promising it."""
    uv = uv_binary()
    if uv is None:
        return False
    key = (xy, os.environ.get("UV_PYTHON_DOWNLOADS_JSON_URL", ""))
    if key not in _offered:
        try:
            proc = subprocess.run([uv, "python", "list", "--only-downloads", "--output-format", "json", xy],
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                                  env={**os.environ, "UV_NO_PROGRESS": "1"})
            rows = json.loads(proc.stdout) if proc.returncode == 0 else None
        except (subprocess.TimeoutExpired, OSError, ValueError):
            rows = None
        # A uv that cannot list (too old for json output, a JSON URL it cannot read): the install
        # itself is tried and says why it failed.
        _offered[key] = rows is None or any(isinstance(r, dict) and r.get("implementation") == "cpython"
                                            for r in rows)
    return _offered[key]


def provision(xy: str, cache_dir: Path) -> tuple[str | None, str]:
    """(path, "") once uv installed Python ``xy`` into the cache, else (None, why)."""
    install_dir = cache_dir / PYTHONS_DIR
    key = (xy, str(install_dir))
    with _lock:  # uv locks its folder too; this keeps one process from asking twice
        if key in _failed:
            return None, _failed[key]
        have = managed_pythons(cache_dir).get(version_tuple(xy) or (0, 0))
        if have:
            return have, ""
        uv = uv_binary()
        if uv is None:
            return None, "uv is not installed (pip install uv)"
        if not uv_offers(xy):
            _failed[key] = f"uv offers no Python {xy} build (its list starts at 3.8)"
            return None, _failed[key]
        install_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "UV_PYTHON_INSTALL_DIR": str(install_dir),
               "UV_CACHE_DIR": str(cache_dir / "uv-cache"), "UV_NO_PROGRESS": "1"}
        try:
            proc = subprocess.run([uv, "python", "install", "--no-bin", xy], env=env, capture_output=True,
                                  text=True, timeout=PROVISION_TIMEOUT_S, stdin=subprocess.DEVNULL)
            err = "" if proc.returncode == 0 else _uv_error(proc.stderr)
        except subprocess.TimeoutExpired:
            err = f"uv python install {xy} took over {PROVISION_TIMEOUT_S} s"
        except OSError as e:
            err = f"uv python install {xy} did not start: {e}"
        have = managed_pythons(cache_dir).get(version_tuple(xy) or (0, 0))
        if have and not err:
            return have, ""
        _failed[key] = err or f"uv python install {xy} left no python{xy} in {install_dir}"
        return None, _failed[key]


def _uv_error(stderr: str) -> str:
    """uv's error and its first cause on one line ("Failed to install ...: Hash mismatch ...")."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    head = [ln for ln in lines if ln.startswith("error:")][:1]
    causes = [ln.removeprefix("Caused by:").removeprefix("cause:").strip() for ln in lines
              if ln.startswith(("Caused by:", "cause:"))][:1]
    text = " ".join(head + causes) or (lines[-1] if lines else "uv failed without a message")
    return text.removeprefix("error:").strip()[:300]


def _needs(xy: str, repo: str, version: str) -> str:
    what = f" for {repo.split('/')[-1]} {version}".rstrip() if repo else ""
    return f"needs Python {xy}{what}"


def resolve(wanted: str, *, cache_dir: Path, provision: bool = True, repo: str = "",
            version: str = "") -> Resolution:
    """The interpreter for a spec's Python ``wanted``: an exact minor on the machine, else one uv
    installs into ``cache_dir`` (when ``provision``), else a measured-safe substitute on the machine,
    else one uv installs (3.6 is not in uv's list, 3.8 is), else none. With ``provision`` False
    nothing is downloaded: the answer says what a build would install (``provisionable``)."""
    target = version_tuple(str(wanted))
    if target is None:
        return Resolution(None, str(wanted), "missing", f"the spec's Python {wanted!r} is not a version")
    xy = f"{target[0]}.{target[1]}"
    have = machine_pythons(cache_dir)
    if target in have:
        return Resolution(have[target], xy, "found", "")
    why = ""
    if provision:
        path, why = _provision(xy, cache_dir)
        if path:
            return Resolution(path, xy, "provisioned", f"Python {xy} installed by uv into {cache_dir / PYTHONS_DIR}")
    elif _may_provision(xy):
        return Resolution(None, xy, "missing", f"{_needs(xy, repo, version)}: {_hint(xy, True)}",
                          provisionable=True)
    subs = SAFE_SUBSTITUTES.get((repo, version), {}).get(xy, ())
    safe = f"measured safe for {repo} {version}"
    for sub in subs:
        sub_t = version_tuple(sub)
        if sub_t is not None and sub_t in have:
            return Resolution(have[sub_t], sub, "substitute", f"Python {sub} for {xy} ({safe})")
    sub_why: list[str] = []
    for sub in subs:
        if not provision:
            if _may_provision(sub):
                return Resolution(None, sub, "substitute", f"Python {sub} for {xy} ({safe}), which uv will install into the cache",
                                  provisionable=True)
            continue
        if not uv_offers(sub):
            continue
        path, err = _provision(sub, cache_dir)
        if path:
            return Resolution(path, sub, "substitute", f"Python {sub} for {xy} ({safe}; installed by uv into "
                              f"{cache_dir / PYTHONS_DIR})")
        sub_why.append(f"{sub}: {err}")
    offered = uv_binary() is None or uv_offers(xy)  # without uv, installing it is the first step
    text = f"{_needs(xy, repo, version)}: {_hint(xy, offered)}"
    if subs:
        text += f", or Python {' or '.join(subs)} ({safe})"
    uv_said = ([why] if offered and why else []) + sub_why
    return Resolution(None, xy, "missing", text + (f" (uv: {'; '.join(uv_said)})" if uv_said else ""))


def _may_provision(xy: str) -> bool:
    """Whether a build would have uv install ``xy`` (asked without downloading)."""
    return uv_binary() is not None and xy not in {k for k, _ in _failed} and uv_offers(xy)


def _hint(xy: str, offered: bool) -> str:
    return f"`uv python install {xy}` or `pyenv install {xy}`" if offered else \
        f"`pyenv install {xy}` (uv offers no Python {xy} build)"


# ``resolve``'s keyword shadows the function inside it.
_provision = provision
