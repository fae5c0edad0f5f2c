"""Attributes the patch uses that exist nowhere: the AttributeError a type checker cannot see.

pyright finds ``obj.missing`` only when it knows the type of ``obj``. In the untyped code most
repositories are, the receiver is often Unknown (a function without annotations returned it),
and pyright stays silent. A plainer question still has a sure answer: does the name exist
anywhere? An attribute the patch reads that no file of the repository at its base commit
mentions (code, C extension, data), that the patch does not define itself, and that no builtin
type or standard-library module has, cannot be found at run time either. Agents do invent such
APIs (``dims.are_equivalent_dims(...)``, ``expr.is_Infinity``); the repository's own tests then
fail with an AttributeError.

What is left out, to stay sure:

- attributes read from a name bound to an import of a module outside the repository (``np.x``):
  third-party packages are not searched;
- attributes stored (``self.x = ...``), and names the patch defines anywhere in the touched files
  (functions, classes, assignments, parameters, keyword arguments, strings used with
  ``setattr``/``getattr``).

The search is one ``git grep -w -F`` over the base commit, for all candidates at once.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import types
import warnings
from functools import lru_cache
from pathlib import Path

from scoring.static.patchinfo import FileChange

RULE = "UnknownAttribute"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Not read: test suites and demos. Python sources are only read; C modules are imported to list
# their names, except those with side effects at import (readline may write terminal escapes).
_SKIP_STDLIB = {"test", "idlelib", "lib2to3", "turtledemo", "__phello__"}
_NO_IMPORT = {"readline", "_tkinter"}


@lru_cache(maxsize=1)
def standard_names() -> frozenset[str]:
    """Every identifier of the standard library's Python sources, and of its builtin and
    extension modules and of the builtin types: names an attribute may rightly have without
    the repository mentioning them."""
    names: set[str] = set()
    for t in (str, bytes, bytearray, list, dict, set, frozenset, tuple, int, float, complex, bool, object, type,
              BaseException, property, classmethod, staticmethod, slice, range, memoryview,
              types.FunctionType, types.MethodType, types.ModuleType, types.GeneratorType, types.CodeType,
              types.FrameType, types.TracebackType, types.SimpleNamespace):
        names.update(dir(t))
    for mod in sorted(sys.stdlib_module_names - _SKIP_STDLIB):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        origin = spec.origin or ""
        if origin.endswith(".py"):
            files = [Path(origin)]
            if spec.submodule_search_locations:
                files = [p for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.py")
                         if "tests" not in p.parts and "test" not in p.parts]
            for path in files:
                try:
                    names.update(_IDENT.findall(path.read_text(encoding="utf-8", errors="replace")))
                except OSError:
                    continue
        elif mod not in _NO_IMPORT and (origin in ("built-in", "frozen") or origin.endswith((".so", ".pyd"))):
            # C modules: their names are only known by importing them (no side effects at import).
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # deprecated C modules (audioop, nis, ...)
                    module = sys.modules.get(mod) or importlib.import_module(mod)
            except Exception:  # noqa: BLE001 - an optional C module missing here is no finding
                continue
            for attr in dir(module):
                names.add(attr)
                value = getattr(module, attr, None)
                if isinstance(value, type):
                    names.update(dir(value))
    return frozenset(names)


def _defined(tree: ast.AST) -> set[str]:
    """Names a file defines or sets in any way an attribute lookup could later find."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            out.add(node.attr)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
            out.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            out.update(_IDENT.findall(node.value))
    return out


def _external_modules(tree: ast.AST, local_tops: set[str]) -> set[str]:
    """Names the file binds to modules (or their members) from outside the repository."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in local_tops:
                    out.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in local_tops:
                out.update(a.asname or a.name for a in node.names)
    return out


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def local_packages(root: Path) -> set[str]:
    """Top-level module names the repository provides (at its root and under src/)."""
    tops: set[str] = set()
    for base in (root, root / "src"):
        if not base.is_dir():
            continue
        for child in base.iterdir():
            if child.is_dir() or child.suffix in (".py", ".pyi", ".pyx"):
                tops.add(child.stem if child.is_file() else child.name)
    return tops


def candidates(change: FileChange, tree: ast.AST, local_tops: set[str]) -> list[tuple[str, int]]:
    """(attribute, line) read on a line the patch added, with a receiver from the repository."""
    external = _external_modules(tree, local_tops)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
            continue
        line = node.end_lineno or node.lineno
        if line not in change.added:
            continue
        root = _root(node.value)
        if isinstance(root, ast.Name) and root.id in external:
            continue
        out.append((node.attr, line))
    return out


def mentioned(repo: Path, commit: str, names: set[str], timeout: float = 120.0) -> set[str]:
    """Which of ``names`` occur as a whole word in any text file of ``commit``."""
    if not names:
        return set()
    args = ["git", "grep", "-I", "-o", "-h", "-w", "-F"]
    for n in sorted(names):
        args += ["-e", n]
    proc = subprocess.run(args + [commit], cwd=repo, capture_output=True, timeout=timeout)
    if proc.returncode not in (0, 1):  # 1: nothing matched
        raise RuntimeError(proc.stderr.decode(errors="replace").strip() or f"git grep failed ({proc.returncode})")
    return set(proc.stdout.decode(errors="replace").split()) & names


def unknown_attributes(repo: Path, commit: str, changes: list[tuple[FileChange, ast.AST]]
                       ) -> list[tuple[FileChange, str, int]]:
    """(change, attribute, line) for each attribute the patch reads that exists nowhere."""
    local_tops = local_packages(repo)
    defined: set[str] = set()
    for _, tree in changes:
        defined |= _defined(tree)
    known = standard_names()
    found: list[tuple[FileChange, str, int]] = []
    for change, tree in changes:
        for attr, line in candidates(change, tree, local_tops):
            if attr not in defined and attr not in known and not (attr.startswith("__") and attr.endswith("__")):
                found.append((change, attr, line))
    present = mentioned(repo, commit, {attr for _, attr, _ in found})
    return [(c, attr, line) for c, attr, line in found if attr not in present]
