"""Which of the repository's existing tests exercise the code a patch changes.

Chosen from the base tree and the candidate patch only (never from the evaluation's tests), the
way a maintainer would pick them:

1. **convention**: the test module of each touched module by the usual layouts
   (``pkg/mod.py`` -> ``pkg/tests/test_mod.py``, ``tests/.../test_mod.py``, ``testing/test_mod.py``,
   ``mod_test.py``);
2. **imports**: test files that import a touched module;
3. **names**: test files that name a function or class the patch changes or defines.

Each file gets a score (convention 4, import 2, one per changed name it mentions, at most 3);
the best ``max_files`` are run, the rest are recorded as left out, and so are files over
``max_file_bytes``. Ties break on the path, so a selection is deterministic.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fixgraph.config import RegressionSettings
from fixgraph.workspace import Worktree
from scoring.patchinfo import PatchParseError, SymbolMap, parse_patch

W_CONVENTION, W_IMPORT, W_NAME, MAX_NAME_HITS = 4, 2, 1, 3
_TEST_DIRS = {"tests", "test", "testing"}
# Names too common to say anything about which test exercises them.
_COMMON = {"__init__", "__call__", "__repr__", "__str__", "__eq__", "__hash__", "main", "run", "get", "set",
           "test", "setup", "call", "copy", "name", "value", "update", "apply", "items"}


@dataclass
class Selection:
    files: list[str] = field(default_factory=list)
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


def select_tests(wt: Worktree, patch: str, settings: RegressionSettings,
                 exclude: set[str] | None = None) -> Selection:
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
    tests = [f for f in tracked if is_test_file(f) and f not in exclude]
    if not tests:
        return sel
    scores: dict[str, int] = {}
    why: dict[str, list[str]] = {}

    def add(path: str, points: int, reason: str) -> None:
        scores[path] = scores.get(path, 0) + points
        why.setdefault(path, []).append(reason)

    by_name: dict[str, list[str]] = {}
    for t in tests:
        by_name.setdefault(PurePosixPath(t).name, []).append(t)
    for mod in modules:
        p = PurePosixPath(mod)
        stem = p.parent.name if p.stem == "__init__" else p.stem
        for candidate in (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem.lstrip('_')}.py"):
            for t in by_name.get(candidate, []):
                if "convention" not in " ".join(why.get(t, [])):
                    add(t, W_CONVENTION + _closeness(mod, t), f"convention: tests {mod}")
    for mod in modules:
        dotted = module_name(mod)
        if not dotted:
            continue
        for t in _grep(wt, _import_pattern(dotted), tests, regex=True):
            if not any(r.startswith("imports") for r in why.get(t, [])):
                add(t, W_IMPORT, f"imports {dotted}")
    names = changed_names(wt, patch)
    sel.changed_names = names
    hits: dict[str, int] = {}
    for name in names[:20]:
        for t in _grep(wt, name, tests, regex=False):
            if hits.get(t, 0) < MAX_NAME_HITS:
                hits[t] = hits.get(t, 0) + 1
                add(t, W_NAME, f"names {name}")
    ranked = sorted(scores, key=lambda t: (-scores[t], t))
    sizes = _sizes(wt, ranked)
    for t in ranked:
        if sizes.get(t, 0) > settings.max_file_bytes:
            sel.left_out.append(f"{t}: {sizes[t]} bytes, over regression.max_file_bytes")
        elif len(sel.files) < settings.max_files:
            sel.files.append(t)
        else:
            sel.left_out.append(f"{t}: over regression.max_files ({settings.max_files})")
    sel.scores = {t: scores[t] for t in ranked}
    sel.why = {t: why[t] for t in ranked}
    return sel


def _closeness(module: str, test: str) -> int:
    """1 when the test lives under the module's package (or its mirror under tests/), else 0."""
    mod_parts = [p for p in PurePosixPath(module).parent.parts if p not in ("src", "lib")]
    test_parts = [p for p in PurePosixPath(test).parent.parts if p not in _TEST_DIRS]
    if not mod_parts:
        return 1
    tail = mod_parts[-1]
    return 1 if tail in test_parts else 0


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


def pytest_file_patterns(wt: Worktree) -> tuple[str, ...]:
    """The ``python_files`` patterns of the repository's own pytest configuration at the base (in
    pytest.ini, tox.ini, setup.cfg or pyproject.toml; () when it sets none). pytest's own repository
    collects ``testing/*/*.py``, so ``testing/python/fixtures.py`` is one of its test files."""
    import configparser
    import tomllib

    for name, section in (("pytest.ini", "pytest"), ("pyproject.toml", ""), ("tox.ini", "pytest"),
                          ("setup.cfg", "tool:pytest")):
        text = wt.read(name)
        if not text:
            continue
        value: Any = None
        if name == "pyproject.toml":
            with contextlib.suppress(tomllib.TOMLDecodeError):
                value = tomllib.loads(text).get("tool", {}).get("pytest", {}).get("ini_options", {}).get("python_files")
        else:
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            with contextlib.suppress(configparser.Error):
                parser.read_string(text)
                value = parser.get(section, "python_files", fallback=None)
        if value:
            return tuple(value.split() if isinstance(value, str) else (str(v) for v in value))
    return ()


def collected_by_pytest(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether pytest collects ``path`` under ``patterns`` when it walks the tree (pytest's own
    rule: a pattern with a ``/`` matches the path, one without matches the file name)."""
    name = PurePosixPath(path).name
    return path.endswith(".py") and any(
        fnmatch.fnmatch(path if "/" in p else name, p) for p in patterns)
