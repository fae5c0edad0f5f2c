"""Which of the repository's existing tests exercise the code a patch changes.

Chosen from the base tree and the candidate patch only (never from the evaluation's tests), the
way a maintainer would pick them:

1. **convention**: the test module of each touched module by the usual layouts
   (``pkg/mod.py`` -> ``pkg/tests/test_mod.py``, ``tests/.../test_mod.py``, ``testing/test_mod.py``,
   ``mod_test.py``, the flattened ``tests/test_sub_mod.py``), but not a namesake in another
   package's test folder (``sympy/core/tests/test_numbers.py`` for ``sympy/functions/.../numbers.py``);
2. **mirror**: the test files of the touched module's subpackage in a mirrored test tree
   (``src/pkg/_sub/mod.py`` -> ``testing/sub/test_*.py``, ``tests/sub/...``) or in its own
   package's test folder (``pkg/sub/tests/``), when that folder is small enough to say something;
3. **imports**: test files that import a touched module, or, for a small package, the package
   itself (``import requests`` in a root ``test_requests.py``);
4. **names**: test files that name a function or class the patch changes or defines.

Test files are the usual names plus the repository's own ``python_files`` patterns (pytest's
``testing/python/*.py``). Each file gets a score (convention 4, mirror 3, import 2, package
import 1, one per changed name it mentions, at most 3); the best are run within three bounds:
``max_files``, ``max_file_bytes`` and ``max_expected_s``, the seconds a run of the selection is
expected to take (the best file runs whatever it costs, up to ``timeout_s``; the budget decides
which others join it). A file's expected seconds are measured: each base run of a selection is
attributed to its files by the tests each reported, and kept per (repo, version, file)
(:class:`CostBook`, in the cache) so a later task skips a file known to be slow; a file never
measured is estimated from its number of test functions at the repository's measured rate. A file that does
not fit still gives, where the runner takes pytest node ids, its tests whose code names a changed
name that few test files mention (at most 20, within what is left of the budget or 5 s): the few
that exercise the change directly in a file too slow to run whole. What is left out is recorded
with the reason. Ties break on the expected seconds (the cheaper first), then
the path, so a selection is deterministic.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import fnmatch
import json
import re
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fixgraph import phases
from fixgraph.config import RegressionSettings
from fixgraph.records import atomic_write, file_lock
from fixgraph.repo.workspace import Worktree
from scoring.execution import django_layout
from scoring.static.patchinfo import PatchParseError, SymbolMap, parse_patch

W_CONVENTION, W_MIRROR, W_IMPORT, W_PACKAGE, W_NAME, MAX_NAME_HITS = 4, 3, 2, 1, 1, 3
# A mirrored test folder (or flattened prefix) with more test files than this names a whole
# subsystem (sympy/core/tests): the other signals have to pick among them.
MAX_MIRROR_FILES = 8
# A package with at most this many modules is small enough that importing it exercises them all.
SMALL_PACKAGE_MODULES = 40
# Before any file of a repository has been measured: seconds per test function, and per process.
MIN_TESTS_FOR_RATE = 20
DEFAULT_S_PER_TEST, S_PER_RUN = 0.1, 3.0
BOOK_SUFFIX = ".idle.json"
# The books before BOOK_SUFFIX were measured at loads of 7 to 23 on 2 cores (3.5 to 11.5 per
# core); read at a quarter of their seconds, they still price a slow file high.
LEGACY_SLOWDOWN = 4.0
# Third-party code a package carries (requests.packages.urllib3): not the package's own modules.
_VENDORED = {"packages", "vendor", "_vendor", "extern", "externals", "thirdparty"}
# The tests of a file left out for its cost that name a changed function or class are the few
# that exercise it directly: they run by node id (pytest's runners), at most this many, within
# the budget left or, when the files took it all, this many seconds.
MAX_NARROW_TESTS, NARROW_MIN_S = 20, 5.0
# A name more test files than this mention is the package's vocabulary (xarray's DataArray), not
# a pointer to the tests of the changed code.
MAX_NAME_FILES = 10
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)", re.M)
_TEST_DIRS = {"tests", "test", "testing"}
# Names too common to say anything about which test exercises them.
_COMMON = {"__init__", "__call__", "__repr__", "__str__", "__eq__", "__hash__", "main", "run", "get", "set",
           "test", "setup", "call", "copy", "name", "value", "update", "apply", "items"}


@dataclass
class Selection:
    files: list[str] = field(default_factory=list)
    # Node ids (``path::Class::test``) of single tests from files that did not fit as a whole.
    tests: list[str] = field(default_factory=list)
    scores: dict[str, int] = field(default_factory=dict)
    why: dict[str, list[str]] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # "path: reason"
    changed_modules: list[str] = field(default_factory=list)
    changed_names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_test_file(path: str) -> bool:
    p = PurePosixPath(path)
    if p.suffix != ".py" or p.name in ("__init__.py", "conftest.py"):
        return False
    if p.name.startswith("test_") or p.name.endswith("_test.py") or p.name == "tests.py":
        return True
    return any(part in _TEST_DIRS for part in p.parts[:-1]) and p.name.startswith("test")


def module_name(path: str) -> str:
    """``src/pkg/sub/mod.py`` -> ``pkg.sub.mod`` (``__init__.py`` names its package)."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] in ("src", "lib"):
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def changed_names(wt: Worktree, patch: str) -> list[str]:
    """Functions and classes the patch changes (on either side) or defines, by their last name."""
    names: list[str] = []
    try:
        changes = parse_patch(patch)
    except PatchParseError:
        return names
    for ch in changes:
        if not ch.is_python or is_test_file(ch.path):
            continue
        after = wt.read(ch.path)
        sides = [(after, ch.added | ch.anchors)] if after is not None else []
        before = _base_text(wt, ch.path)
        if before is not None:
            sides.append((before, ch.removed | ch.anchors))
        for text, lines in sides:
            for scope in SymbolMap(text).functions_touching(frozenset(lines)):
                for part in scope.qualname.split("."):
                    if part not in names:
                        names.append(part)
        if after is not None:  # names the patch itself defines (a new helper, a new class)
            try:
                tree = ast.parse(after)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                        and node.lineno in ch.added and node.name not in names):
                    names.append(node.name)
    return [n for n in names if len(n) >= 4 and n not in _COMMON and not n.startswith("test")]


def _fill(sel: Selection, ranked: list[str], cost: dict[str, tuple[float, str]], sizes: dict[str, int],
          settings: RegressionSettings, budget: float, django: bool) -> float:
    """The ranked files into ``sel.files`` within the limits, each left out with its reason; the
    expected seconds left of the budget."""
    for t in ranked:
        unrunnable = django_layout.not_runnable(t) if django else ""
        if unrunnable:
            sel.left_out.append(f"{t}: not runnable here, {unrunnable}")
            continue
        if sizes.get(t, 0) > settings.max_file_bytes:
            sel.left_out.append(f"{t}: {sizes[t]} bytes, over regression.max_file_bytes")
            continue
        if len(sel.files) >= settings.max_files:
            sel.left_out.append(f"{t}: over regression.max_files ({settings.max_files})")
            continue
        if cost:
            expected, how = cost[t]
            # The best file runs whatever it costs (up to the run's timeout): the module's own test
            # file is the strongest evidence there is, and a small unrelated one is no substitute.
            if sel.files and expected > budget:
                sel.left_out.append(f"{t}: {how} {expected:.0f}s, over regression.max_expected_s "
                                    f"({max(budget, 0):.0f}s left of {settings.max_expected_s:g}s)")
                continue
            if not sel.files and expected > settings.timeout_s:
                sel.left_out.append(f"{t}: {how} {expected:.0f}s, over regression.timeout_s")
                continue
            budget -= expected
        sel.files.append(t)
    return budget


def _narrow(sel: Selection, wt: Worktree, ranked: list[str], why: dict[str, list[str]], specific: list[str],
            costs: CostBook | None, allowance: float, django: bool) -> None:
    """Single tests that name changed code, from files left out as a whole, within ``allowance``."""
    for t in ranked:
        if t in sel.files or not any(r.startswith("names") for r in why.get(t, [])) or len(sel.tests) >= MAX_NARROW_TESTS:
            continue
        if django and django_layout.not_runnable(t):
            continue
        ids = tests_naming(_base_text(wt, t) or "", t, specific)
        per_test = costs.per_test(t, _count_tests(wt, t)) if costs is not None else 0.0
        for node in ids[:MAX_NARROW_TESTS - len(sel.tests)]:
            if per_test > allowance:
                break
            sel.tests.append(node)
            allowance -= per_test
        if ids:
            sel.left_out.append(f"{t}: as a whole; {sum(n.startswith(t + '::') for n in sel.tests)} of its "
                                f"{len(ids)} tests that name changed code run alone")


@phases.timed("test selection")
def select_tests(wt: Worktree, patch: str, settings: RegressionSettings,
                 exclude: set[str] | None = None, costs: CostBook | None = None,
                 node_ids: bool = False, repo: str = "") -> Selection:
    """The existing tests to run for ``patch``; ``costs`` (measured seconds per file) bounds the
    selection by ``settings.max_expected_s`` too. ``node_ids``: the runner takes single tests
    (pytest's node ids, django's labels), so a file left out for its cost still gives the tests
    that name changed code. ``repo``: django's layout is known by its name or its
    ``tests/runtests.py`` (:mod:`scoring.execution.django_layout`)."""
    exclude = exclude or set()
    sel = Selection()
    try:
        changes = parse_patch(patch)
    except PatchParseError:
        return sel
    modules = [ch.path for ch in changes if ch.is_python and not is_test_file(ch.path) and not ch.is_new]
    modules += [ch.path for ch in changes if ch.is_python and not is_test_file(ch.path) and ch.is_new]
    sel.changed_modules = modules
    if not modules:
        return sel
    tracked = _base_files(wt)
    patterns = python_files_patterns(wt)
    tests = [f for f in tracked if (is_test_file(f) or matches_patterns(f, patterns)) and f not in exclude]
    django = django_layout.is_django(repo, tracked)
    if django:
        tests = [t for t in tests if django_layout.is_app_test(t)]
    if not tests:
        return sel
    scores: dict[str, int] = {}
    why: dict[str, list[str]] = {}

    def add(path: str, points: int, reason: str) -> None:
        scores[path] = scores.get(path, 0) + points
        why.setdefault(path, []).append(reason)

    def has(path: str, kind: str) -> bool:
        return any(r.startswith(kind) for r in why.get(path, []))

    by_name: dict[str, list[str]] = {}
    for t in tests:
        by_name.setdefault(PurePosixPath(t).name, []).append(t)
    for mod in modules:
        p = PurePosixPath(mod)
        stem = p.parent.name if p.stem == "__init__" else p.stem
        flat = "_".join([*_subpackage(mod), stem.lstrip("_")])
        for candidate in (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem.lstrip('_')}.py", f"test_{flat}.py"):
            for t in by_name.get(candidate, []):
                if not has(t, "convention") and not _foreign(mod, t):
                    add(t, W_CONVENTION + _closeness(mod, t), f"convention: tests {mod}")
    for mod in modules:
        mirrored = django_layout.app_tests(mod, tests, MAX_MIRROR_FILES) if django else _mirrored(mod, tests)
        for t in mirrored:
            if not has(t, "convention") and not has(t, "mirror"):
                add(t, W_MIRROR, f"mirror: test folder of {'/'.join(_subpackage(mod))}")
    packages: set[str] = set()
    for mod in modules:
        dotted = module_name(mod)
        if not dotted:
            continue
        for t in _grep(wt, _import_pattern(dotted), tests, regex=True):
            if not has(t, "imports"):
                add(t, W_IMPORT, f"imports {dotted}")
        top = dotted.split(".", 1)[0]
        if top != dotted and _is_small_package(tracked, mod, top):
            packages.add(top)
    for top in sorted(packages):
        for t in _grep(wt, rf"^\s*(import\s+{re.escape(top)}\b|from\s+{re.escape(top)}(\.\S+)?\s+import)", tests, regex=True):
            if not has(t, "imports"):
                add(t, W_PACKAGE, f"imports the package {top} (small)")
    names = changed_names(wt, patch)
    sel.changed_names = names
    hits: dict[str, int] = {}
    spread: dict[str, int] = {}  # how many test files name each changed name
    for name in names[:20]:
        found = _grep(wt, name, tests, regex=False)
        spread[name] = len(found)
        for t in found:
            if hits.get(t, 0) < MAX_NAME_HITS:
                hits[t] = hits.get(t, 0) + 1
                add(t, W_NAME, f"names {name}")
    if not scores and not django:
        # Nothing mirrored, imported or named the changed code: its subpackage's crowded mirror
        # (``tests/test_ext_autodoc_*.py`` for ``sphinx/ext/autodoc/typehints.py``, eleven files)
        # is still closer than nothing, the cheapest first within the expected seconds.
        for mod in modules:
            for t in _mirrored(mod, tests, cap=len(tests)):
                if not has(t, "kin"):
                    add(t, W_PACKAGE, f"kin: the crowded test folder of {'/'.join(_subpackage(mod)) or mod}")
    # Among files with the same evidence the cheaper runs first: a slow one must not take the budget.
    cost = {t: costs.expected(t, _count_tests(wt, t)) for t in scores} if costs is not None else {}
    ranked = sorted(scores, key=lambda t: (-scores[t], cost[t][0] if cost else 0.0, t))
    sizes = _sizes(wt, ranked)
    budget = settings.max_expected_s - (S_PER_RUN if costs is not None else 0.0)
    budget = _fill(sel, ranked, cost, sizes, settings, budget, django)
    specific = [n for n in names[:20] if spread.get(n, 0) <= MAX_NAME_FILES]
    if node_ids and cost and specific:
        _narrow(sel, wt, ranked, why, specific, costs, max(budget, NARROW_MIN_S), django)
    sel.scores = {t: scores[t] for t in ranked}
    sel.why = {t: why[t] for t in ranked}
    return sel


class CostBook:
    """Seconds each test file takes at the base on an idle machine, measured, per (repository,
    version).

    Kept in ``<cache>/test-costs/<owner>+<name>__<version>.idle.json`` and shared by every task of
    that version (and, for the rate per test, of the repository), so the cost of a file is paid once
    before a selection can leave it out. A file's seconds are the base run's, shared among its
    files by the number of tests each reported (the process start-up included), and divided by the
    machine's slowdown during the run (``SuiteRun.slowdown``): a file measured at a load of 8 per core would
    otherwise be priced out of every later selection, and, being left out, never measured again."""

    def __init__(self, cache_dir: Path, repo: str, version: str):
        self.folder = cache_dir / "test-costs"
        self.slug = repo.replace("/", "+")
        # ".idle": books written before the seconds were divided by the load are not read.
        self.path = self.folder / f"{self.slug}__{re.sub(r'[^A-Za-z0-9_.-]', '_', version or 'any')}{BOOK_SUFFIX}"
        self._book: dict[str, dict[str, float]] | None = None
        self._rate: float | None = None

    def _load(self, path: Path) -> dict[str, dict[str, float]]:
        with contextlib.suppress(OSError, json.JSONDecodeError):
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                return {k: v for k, v in data.items() if isinstance(v, dict) and "s" in v}
        return {}

    @property
    def book(self) -> dict[str, dict[str, float]]:
        if self._book is None:
            self._book = {**self._legacy(), **self._load(self.path)}
        return self._book

    def _legacy(self) -> dict[str, dict[str, float]]:
        """The book written before seconds were divided by the load, at 1/LEGACY_SLOWDOWN of its
        seconds: a file known slow stays known slow until a new measurement replaces it."""
        old = self._load(self.path.with_name(self.path.name.removesuffix(BOOK_SUFFIX) + ".json"))
        return {f: {**v, "s": round(float(v["s"]) / LEGACY_SLOWDOWN, 2)} for f, v in old.items()}

    def rate(self) -> float:
        """Measured seconds per test in this repository (this version, else any), else the default:
        all seconds over all tests, so the start-up a small file's share carries does not make
        every test look slow. Only this book's own measurements count: a legacy run's seconds,
        divided by a guess of its load, are a bound for its files, not a rate for all."""
        if self._rate is None:
            measured = [v for v in self._load(self.path).values() if v.get("n")]
            if not measured:
                for other in sorted(self.folder.glob(f"{self.slug}__*{BOOK_SUFFIX}")):
                    measured += [v for v in self._load(other).values() if v.get("n")]
            tests = sum(v["n"] for v in measured)
            # A few tests say little: one slow file would otherwise price every other one out.
            self._rate = sum(v["s"] for v in measured) / tests if tests >= MIN_TESTS_FOR_RATE else DEFAULT_S_PER_TEST
        return self._rate

    def per_test(self, path: str, n_tests: int) -> float:
        """Seconds one test of ``path`` takes: its measured seconds over the tests it reported
        (parametrized ones counted), else the repository's rate."""
        known = self.book.get(path)
        if known is not None and known.get("n"):
            return float(known["s"]) / float(known["n"])
        return self.expected(path, n_tests)[0] / max(n_tests, 1)

    def expected(self, path: str, n_tests: int) -> tuple[float, str]:
        """(seconds, "measured" | "estimated") for one run of ``path``."""
        known = self.book.get(path)
        if known is not None:
            return float(known["s"]), "measured"
        return max(n_tests, 1) * self.rate(), "estimated"

    def record(self, wt: Worktree, files: Iterable[str], statuses: dict[str, str], seconds: float,
               slowed: float = 1.0) -> None:
        """Share ``seconds`` (one base run of ``files``, at ``slowed`` times an idle machine's)
        among the files by the tests each reported."""
        counts = self._counts(wt, list(files), statuses)
        total = sum(counts.values())
        if not total or seconds <= 0:
            return
        idle = seconds / max(slowed, 1.0)
        self._write({f: {"s": round(idle * n / total, 2), "n": n} for f, n in counts.items() if n})

    def record_timeout(self, wt: Worktree, files: Iterable[str], statuses: dict[str, str],
                       timeout_s: float, slowed: float = 1.0) -> None:
        """A base run of ``files`` killed at ``timeout_s``: the files it did not finish (fewer tests
        reported than they define) share at least those seconds, so the next selection does not pick
        the same too-slow files again. A lower bound (``n`` 0): it never sets the rate per test, and
        a complete run later replaces it."""
        counts = self._counts(wt, files := list(files), statuses)
        unfinished = [f for f in files if not counts[f] or counts[f] < _count_tests(wt, f)]
        if not unfinished or timeout_s <= 0:
            return
        share = round(timeout_s / max(slowed, 1.0) / len(unfinished), 2)
        self._write({f: {"s": share, "n": 0} for f in unfinished
                     if self.book.get(f, {}).get("s", 0.0) < share})

    def _counts(self, wt: Worktree, files: list[str], statuses: dict[str, str]) -> dict[str, int]:
        counts = dict.fromkeys(files, 0)
        names: dict[str, str] = {}
        for f in files:
            for name in _TEST_DEF.findall(wt.read(f) or ""):
                names.setdefault(name, f)
        for test_id in statuses:
            if "::" in test_id:
                f = test_id.split("::", 1)[0]
            elif django_layout.owner_label(test_id):
                f = django_layout.owning_file(test_id, files) or ""
            else:  # a bare name (sympy's runner): the file that defines it
                f = names.get(test_id.split(" ", 1)[0].split("[", 1)[0], "")
            if f in counts:
                counts[f] += 1
        return counts

    def _write(self, entries: dict[str, dict[str, float]]) -> None:
        if not entries:
            return
        with file_lock(self.path.with_suffix(".lock")):
            book = self._load(self.path)
            book.update(entries)
            atomic_write(self.path, json.dumps(book, indent=0, sort_keys=True))
            self._book, self._rate = None, None  # read again, with the legacy entries under it


def tests_naming(text: str, path: str, names: list[str]) -> list[str]:
    """Node ids of the test functions (and test methods, by class) in ``text`` whose code names
    one of ``names`` as a whole word."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    if not names:
        return []
    word = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b")
    lines = text.splitlines()

    def names_one(node: ast.AST) -> bool:
        end = getattr(node, "end_lineno", None) or getattr(node, "lineno", 0)
        return bool(word.search("\n".join(lines[getattr(node, "lineno", 1) - 1:end])))

    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            if names_one(node):
                out.append(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef):
            out += [f"{path}::{node.name}::{m.name}" for m in node.body
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                    and names_one(m)]
    return out


def python_files_patterns(wt: Worktree) -> list[str]:
    """The repository's own pytest ``python_files`` patterns beyond the usual names (pytest's
    ``testing/*/*.py``), read from its configuration at the base commit."""
    import tomllib

    found: list[str] = []
    for name, section in (("pytest.ini", "pytest"), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        text = _base_text(wt, name)
        if not text:
            continue
        cfg = configparser.ConfigParser(interpolation=None, strict=False)
        with contextlib.suppress(configparser.Error):
            cfg.read_string(text)
            found += cfg.get(section, "python_files", fallback="").split()
    with contextlib.suppress(tomllib.TOMLDecodeError, AttributeError):
        value = tomllib.loads(_base_text(wt, "pyproject.toml") or "").get("tool", {}).get("pytest", {}).get(
            "ini_options", {}).get("python_files") or []
        found += value.split() if isinstance(value, str) else [str(v) for v in value]
    usual = {"test_*.py", "*_test.py", "tests.py", "test*.py"}
    return [p for p in dict.fromkeys(found) if p not in usual][:10]


def matches_patterns(path: str, patterns: list[str]) -> bool:
    name = PurePosixPath(path).name
    if name in ("__init__.py", "conftest.py") or not name.endswith(".py"):
        return False
    return any(fnmatch.fnmatchcase(path if "/" in pat else name, pat) for pat in patterns)


def _subpackage(module: str) -> list[str]:
    """``src/_pytest/_code/code.py`` -> ``["code"]``: the folders between the top package and the
    module, leading underscores off (a private package's tests drop them)."""
    parts = [p for p in PurePosixPath(module).parent.parts if p not in ("src", "lib")]
    return [p.lstrip("_") for p in parts[1:] if p.lstrip("_")]


def _mirrored(module: str, tests: list[str], cap: int = MAX_MIRROR_FILES) -> list[str]:
    """Test files in the mirror of the module's subpackage: ``testing/code/test_*.py`` and
    ``tests/code/...`` for ``src/_pytest/_code/code.py``, or the flattened ``tests/test_code_*.py``;
    and the module's own package's test folder (``sympy/functions/combinatorial/tests/`` for
    ``.../combinatorial/numbers.py``, whose tests are ``test_comb_numbers.py``); nothing from a
    folder holding more than ``cap`` files."""
    package = PurePosixPath(module).parent  # a top-level module has none: tests/ is everyone's
    own = [t for t in tests if package.parts and PurePosixPath(t).parent in {package / d for d in _TEST_DIRS}]
    sub = _subpackage(module)
    if not sub:
        return own if len(own) <= cap else []
    nested = [t for t in tests if _test_dir_parts(t) == sub]
    prefix = "test_" + "_".join(sub) + "_"
    flat = [t for t in tests if PurePosixPath(t).name.startswith(prefix)
            and len(PurePosixPath(t).parts) == 2 and PurePosixPath(t).parts[0] in _TEST_DIRS]
    return list(dict.fromkeys(t for group in (own, nested, flat) if len(group) <= cap for t in group))


def _test_dir_parts(test: str) -> list[str]:
    """The folders of a test file below a top-level test root: ``testing/code/test_x.py`` ->
    ``["code"]``; empty for a file under the package (``pkg/sub/tests/``), which is the
    convention's and closeness's business."""
    parts = list(PurePosixPath(test).parent.parts)
    for i, part in enumerate(parts):
        if part in _TEST_DIRS:
            return [p.lstrip("_") for p in parts[i + 1:]] if i == 0 else []
    return []


def _is_small_package(tracked: list[str], module: str, top: str) -> bool:
    root = "/".join(PurePosixPath(module).parts[:PurePosixPath(module).parts.index(top) + 1]) \
        if top in PurePosixPath(module).parts else top
    count = sum(1 for f in tracked if f.startswith(root + "/") and f.endswith(".py") and not is_test_file(f)
                and not _VENDORED & set(PurePosixPath(f[len(root) + 1:]).parts[:-1]))
    return 0 < count <= SMALL_PACKAGE_MODULES


def _count_tests(wt: Worktree, path: str) -> int:
    return len(_TEST_DEF.findall(wt.read(path) or ""))


def _foreign(module: str, test: str) -> bool:
    """A test file in another package's own test folder: ``sympy/core/tests/test_numbers.py``
    tests ``sympy/core/numbers.py``, not ``sympy/functions/combinatorial/numbers.py``. A
    top-level test folder (``tests/``, ``testing/``) or a package folder above the module's is
    not foreign."""
    parts = PurePosixPath(test).parent.parts
    at = next((i for i, part in enumerate(parts) if part in _TEST_DIRS), 0)
    owner = [p for p in parts[:at] if p not in ("src", "lib")]
    package = [p for p in PurePosixPath(module).parent.parts if p not in ("src", "lib")]
    return bool(owner) and package[:len(owner)] != owner


def _closeness(module: str, test: str) -> int:
    """1 when the test lives under the module's package (or its mirror under tests/), else 0."""
    mod_parts = [p for p in PurePosixPath(module).parent.parts if p not in ("src", "lib")]
    test_parts = [p for p in PurePosixPath(test).parent.parts if p not in _TEST_DIRS]
    if not mod_parts:
        return 1
    tail = mod_parts[-1]
    # django's test apps are named after the package, often with ``_tests`` (``tests/utils_tests/``).
    return 1 if tail in test_parts or f"{tail}_tests" in test_parts else 0


def _import_pattern(dotted: str) -> str:
    parent, _, leaf = dotted.rpartition(".")
    alternatives = [rf"import\s+{re.escape(dotted)}\b", rf"from\s+{re.escape(dotted)}\s+import"]
    if parent:
        alternatives.append(rf"from\s+{re.escape(parent)}\s+import\s+[^#\n]*\b{re.escape(leaf)}\b")
    return "|".join(f"({a})" for a in alternatives)


def _git(wt: Worktree, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=wt.path, capture_output=True,
                          text=True, errors="replace", timeout=120)


def _base_files(wt: Worktree) -> list[str]:
    proc = _git(wt, "ls-tree", "-r", "-z", "--name-only", wt.base)
    return [p for p in proc.stdout.split("\x00") if p]


def _base_text(wt: Worktree, path: str) -> str | None:
    proc = _git(wt, "show", f"{wt.base}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def _grep(wt: Worktree, pattern: str, paths: list[str], *, regex: bool) -> list[str]:
    """Which of ``paths`` contain ``pattern`` at the base commit (a whole word when not a regex)."""
    found: list[str] = []
    flags = ["-E"] if regex else ["-w", "-F"]
    for start in range(0, len(paths), 500):  # bounded argv
        chunk = paths[start:start + 500]
        proc = _git(wt, "grep", "-l", "-I", *flags, "-e", pattern, wt.base, "--", *chunk)
        prefix = f"{wt.base}:"
        found += [ln[len(prefix):] if ln.startswith(prefix) else ln for ln in proc.stdout.splitlines()]
    return found


def _sizes(wt: Worktree, paths: list[str]) -> dict[str, int]:
    if not paths:
        return {}
    proc = _git(wt, "ls-tree", "-l", wt.base, "--", *paths)
    out: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        meta, _, path = line.partition("\t")
        parts = meta.split()
        if len(parts) >= 4 and parts[3].isdigit():
            out[path] = int(parts[3])
    return out

