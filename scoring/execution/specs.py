"""What the ``swebench`` package knows about each repo: install specs, test commands, log parsers.

Install specs and test commands are swebench's ``MAP_REPO_VERSION_TO_SPECS``. swebench 4.x keeps
it in ``swebench.harness.constants``; swebench 5 moved it out of the package (into each dataset
row's ``eval_script``), and the Lite JSONL this project reads has no such rows. So when the
installed swebench has no map, the table comes from ``scoring/execution/data/swebench_specs.json``, shipped
with the package: swebench 4.1.0's map for the SWE-bench repos (its provenance is in the file;
``eval/make_specs.py`` wrote it). A run never needs a package index. Log parsers always come
from the installed swebench.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fixgraph.sandbox import nofollow
from scoring.execution import django_layout

# swebench's list of files in a test patch that are not tests.
NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")

Parser = Callable[[str, Any], dict[str, str]]


class SpecsError(Exception):
    """swebench's specs could not be loaded; one line for the user."""


SPECS_DATA = "data/swebench_specs.json"


@cache
def _specs_tables(cache_dir: Path) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, list[str]]]:
    del cache_dir  # kept for callers; the shipped table needs no cache
    try:
        from swebench.harness import constants as c  # type: ignore[import-untyped]

        specs = getattr(c, "MAP_REPO_VERSION_TO_SPECS", None)
        if specs:
            return specs, dict(getattr(c, "MAP_REPO_TO_REQS_PATHS", {}))
    except ImportError:
        pass
    try:
        data = json.loads(resources.files("scoring.execution").joinpath(SPECS_DATA).read_text())
        return data["specs"], data["reqs_paths"]
    except (OSError, ValueError, KeyError) as exc:
        raise SpecsError(f"swebench install specs unavailable: scoring/execution/{SPECS_DATA} unreadable ({exc})") from exc


def repo_specs(cache_dir: Path, repo: str, version: str) -> dict[str, Any] | None:
    """swebench's install spec for ``repo`` at ``version``, or None when it has none."""
    specs, _ = _specs_tables(cache_dir.resolve())
    return specs.get(repo, {}).get(version)


def requirements_paths(cache_dir: Path, repo: str) -> list[str]:
    return list(_specs_tables(cache_dir.resolve())[1].get(repo, []))


# swebench's replacements for packages yanked from PyPI (harness/test_spec/python.py).
REPLACE_REQ_PACKAGES = [("types-pkg_resources", "types-setuptools")]


def requirements_text(checkout: Path, repo: str, paths: list[str]) -> str | None:
    """The repo's requirements as swebench's harness builds them: the first requirements file
    found, ``-r`` includes inlined, ``-e .``, comments and ``.[test`` lines dropped (the package
    itself is installed by the spec's ``install`` step). None when no file is there."""
    def keep(line: str) -> bool:
        return not any(line.strip().startswith(x) for x in ("-e .", "#", ".[test"))

    def read(rel: str) -> str | None:
        # The checkout is the repository's: a requirements file that is a link (to /root/.env)
        # is not read through, nor an include that leaves the checkout.
        try:
            return nofollow.read_bytes(checkout, rel, 5_000_000).decode(errors="replace")
        except OSError:
            return None

    for rel in paths:
        content = read(rel)
        if content is None:
            continue
        original: list[str] = []
        extra: list[str] = []
        for line in content.splitlines():
            if line.strip().startswith("-r"):
                inc = read(posixpath.normpath(posixpath.join(posixpath.dirname(rel), line.strip()[2:].strip())))
                if inc is not None:
                    extra += [ln for ln in inc.splitlines() if keep(ln)]
            elif keep(line):
                original.append(line)
        text = "\n".join([*extra, *original]) + "\n"
        for old, new in REPLACE_REQ_PACKAGES:
            text = re.sub(rf"^{re.escape(old)}([<>=!~]=?.*|$)", new, text, flags=re.M)
        return text
    return None


def log_parser(repo: str, kind: str = "") -> Parser:
    """swebench's log parser for ``repo``; pytest's for repos it does not know (fixtures), or
    unittest's verbose lines (read by the parser swebench has for django's runner) or pytest's when an
    inferred environment's ``kind`` says so."""
    from swebench.harness import log_parsers as lp  # type: ignore[import-untyped]

    if kind == "unittest":
        from swebench.harness.log_parsers.python import parse_log_django  # type: ignore[import-untyped]

        return parse_log_django
    if kind == "pytest":  # an inferred env runs pytest whatever the repository's own runner is
        return lp.parse_log_pytest
    table = getattr(lp, "MAP_REPO_TO_PARSER", None)
    if table is None:
        from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY as table  # type: ignore[import-untyped]
    return table.get(repo, lp.parse_log_pytest)


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PATH_NAME = re.compile(r"^[^\s:]+\.py:(\w+)$")
_SYMPY_LAST = re.compile(r"^(test_\w+) (ok|F|E)\s+\[(?:OK|FAIL)\]$")
# django (unittest) with a failing subTest: the test's own line gets no status, and the failure
# header carries the subtest's parameters after the id.
_DJANGO_SUBTEST = re.compile(r"^(FAIL|ERROR): (\w+ \([\w.]+\)) \(.*\)$")
# django (unittest, --verbosity 2) with a test that has a docstring: its id alone on a line, the
# docstring's first line with the status on the next; swebench's parser names the test by the
# docstring (as the harness's FAIL_TO_PASS lists do).
_DJANGO_ID_LINE = re.compile(r"^\w+ \([\w.]+\)$")
_DJANGO_STATUS = re.compile(r" \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b")
_DJANGO_WORDS = {"ok": "PASSED", "FAIL": "FAILED", "ERROR": "ERROR", "skipped": "SKIPPED",
                 "expected failure": "XFAIL", "unexpected success": "FAILED"}


def parse_log(repo: str, log: str, kind: str = "") -> dict[str, str]:
    """Test id -> status, as swebench's parser reads ``log``, with sympy's last test of a file
    and django's tests whose subtests failed.

    sympy's runner ends the line of a file's last test with the file's verdict (``test_x ok
    [OK]``), which swebench's parser does not read: a failing last test is found only under its
    failure header, as ``path.py:test_x``, and a passing one not at all. Both are read here under
    the bare name the test has everywhere else (and in FAIL_TO_PASS), so a reproduction test of
    one function has the same id before and after a fix. The harness never lists such a test, so
    the hidden tests' verdicts do not change."""
    if kind:  # an inferred env runs the repository's own pytest config, which may ask for colour
        log = ANSI.sub("", log)
    try:
        statuses = dict(log_parser(repo, kind)(log, None))
    except Exception:  # a parser crash on odd output means nothing parsed, not a runner crash
        return {}
    if repo == "django/django":
        _django_full_ids(log, statuses)
    if repo != "sympy/sympy":
        return statuses
    for line in log.splitlines():
        match = _SYMPY_LAST.match(line.strip())
        if match and match.group(1) not in statuses:
            statuses[match.group(1)] = {"ok": "PASSED", "F": "FAILED", "E": "ERROR"}[match.group(2)]
    for test_id in [t for t in statuses if _PATH_NAME.match(t)]:
        status = statuses.pop(test_id)
        name = test_id.rsplit(":", 1)[1]
        if statuses.get(name) in (None, "PASSED"):
            statuses[name] = status
    return statuses


def _django_full_ids(log: str, statuses: dict[str, str]) -> None:
    """Add, under their full ids (``test_x (app.module.Class)``), the django tests swebench's parser
    reads only by another name: the bare name of a test whose subTest failed (its own line gets no
    status), and the docstring of a test that has one. A test's id is then the same whether it
    fails or passes, and the file it belongs to is known. The parser's own entries stay: hidden
    tests are graded by them, as the harness does."""
    lines = log.splitlines()
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        line = line.rstrip()
        if (match := _DJANGO_SUBTEST.match(line)) and match.group(2) not in statuses:
            # not found under its full id, the harness counts it as not passed, as FAILED does
            statuses[match.group(2)] = "FAILED" if match.group(1) == "FAIL" else "ERROR"
        elif (_DJANGO_ID_LINE.match(line) and line not in statuses
              and not _DJANGO_ID_LINE.match(following.rstrip())
              and (status := _DJANGO_STATUS.search(following))):
            statuses[line] = _DJANGO_WORDS[status.group(1)]


def patch_files(patch: str) -> list[str]:
    """Paths a diff touches (new side), in order."""
    out: list[str] = []
    for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)", patch, flags=re.M):
        for p in (m.group(1), m.group(2)):
            if p not in out:
                out.append(p)
    return out


def django_label(target: str) -> str:
    """``tests/<app>/test_x.py`` -> ``<app>.test_x``: the label django's ``runtests.py`` runs a
    test module by (swebench's harness passes these); a single test's node id
    ``tests/<app>/tests.py::Class::test_y`` -> ``<app>.tests.Class.test_y``. Anything else (a
    dotted label already) is returned as it is."""
    path, sep, rest = target.partition("::")
    if not path.endswith(".py"):
        return target
    label = django_layout.label_of(path)
    return label + ("." + rest.replace("::", ".") if sep and rest else "")


def test_directives(repo: str, files: list[str]) -> list[str]:
    """What to pass to the test command for these test files, as swebench's harness does (django:
    dotted modules relative to ``tests/``)."""
    files = [f for f in files if not f.endswith(NON_TEST_EXTS)]
    if repo == "django/django":
        files = [django_label(f) for f in files]
    return files


# The locale swebench's images generate (``locale-gen en_US.UTF-8``) is a system step a venv cannot
# take; C.UTF-8 is always there and is UTF-8 too, which is what django's tests need of it.
# LANGUAGE (gettext's list of languages) keeps its value.
_LOCALE_VARS = {"LANG", "LC_ALL"}


def eval_env(spec: dict[str, Any] | None) -> dict[str, str]:
    """The ``export K=V`` lines of the spec's ``eval_commands`` (swebench runs them before the
    tests) as env vars; the locale is C.UTF-8 (see ``_LOCALE_VARS``). Other commands are system
    steps (``locale-gen``) and are left out."""
    out: dict[str, str] = {}
    for cmd in (spec or {}).get("eval_commands", []) or []:
        m = re.fullmatch(r"\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*", str(cmd))
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        out[key] = "C.UTF-8" if key in _LOCALE_VARS else value
    return out


# Flags of a repository's test command that the harness passes for its recorded lists' sake and
# that only slow a comparison of two runs made alike: sympy's ``-C`` turns its cache off, so every
# test recomputes what the cache keeps (sympy 1.1's test_hyperbolic.py: 7.6 s with it, 0.7 s without).
HARNESS_ONLY_FLAGS: dict[str, frozenset[str]] = {"sympy/sympy": frozenset({"-C", "--no-cache"})}


def test_command(repo: str, spec: dict[str, Any] | None, python: str,
                 own: bool = False) -> tuple[list[str], dict[str, str]]:
    """The repo's own test command as argv, with ``python`` as the interpreter, plus env vars.

    swebench writes commands as shell strings (``PYTHONWARNINGS=... bin/test -C --verbose``,
    ``./tests/runtests.py ...``, ``pytest -rA``); leading assignments become env vars and scripts
    and ``pytest``/``tox`` run under the chosen interpreter so the venv is the one used. ``own``:
    a run of fixgraph's own checks, without :data:`HARNESS_ONLY_FLAGS`.
    """
    if spec is None:
        return [python, "-m", "pytest", "-rA", "-p", "no:cacheprovider"], {}
    words = shlex.split(spec["test_cmd"])
    if own:
        words = [w for w in words if w not in HARNESS_ONLY_FLAGS.get(repo, frozenset())]
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, _, val = words.pop(0).partition("=")
        env[key] = val
    head, rest = words[0], words[1:]
    if head in ("pytest", "py.test"):
        argv = [python, "-m", "pytest", *rest]
    elif head == "tox":
        argv = [python, "-m", "tox", *rest]
    elif head in ("python", "python3"):
        argv = [python, *rest]
    else:  # a script in the repo: bin/test, ./tests/runtests.py
        argv = [python, head.removeprefix("./"), *rest]
    return argv, env


def takes_node_ids(spec: dict[str, Any] | None) -> bool:
    """Whether the repo's test command hands its arguments to pytest, where ``path::Class::test``
    selects one test (sympy's ``bin/test`` and django's ``runtests.py`` take files or modules)."""
    if spec is None:
        return True
    words = [w for w in shlex.split(spec["test_cmd"]) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
    return bool(words) and words[0] in ("pytest", "py.test", "tox")


def takes_test_labels(spec: dict[str, Any] | None) -> bool:
    """Whether single tests can be named to the repo's test command: pytest's node ids, or
    django's ``runtests.py`` labels (``app.tests.Class.test_x``, from a node id by
    :func:`test_directives`); sympy's ``bin/test`` takes files only."""
    if takes_node_ids(spec):
        return True
    return bool(spec) and "runtests.py" in str(spec.get("test_cmd", "")).split(" ", 1)[0]


def uses_pytest(argv: list[str]) -> bool:
    return "pytest" in argv[:3]
