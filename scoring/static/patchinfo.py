"""What a unified diff touches: files, added lines, and the functions around them.

Shared by the static phase, the guard and the LLM check, so all three agree on what the patch
changed.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field

from unidiff.errors import UnidiffParseError
from unidiff.patch import PatchSet

from fixgraph import astlock
from fixgraph.repo.workspace import Worktree


class PatchParseError(Exception):
    """The text is not a unified diff."""


@dataclass(frozen=True)
class FileChange:
    path: str  # repository-relative, the "after" name (the "before" name for a deletion)
    is_new: bool
    is_deleted: bool
    added: frozenset[int] = field(default_factory=frozenset)  # line numbers in the new file
    removed: frozenset[int] = field(default_factory=frozenset)  # line numbers in the old file
    # Old-file lines next to which lines were added (for pure insertions: where they went).
    anchors: frozenset[int] = field(default_factory=frozenset)

    @property
    def is_python(self) -> bool:
        return self.path.endswith((".py", ".pyi"))

    @property
    def is_scaffold(self) -> bool:
        """Not part of the fix itself: see :func:`is_scaffold`."""
        return is_scaffold(self.path, self.is_new)


def is_test_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    # Not "testing/" anywhere: sympy keeps library code in sympy/testing/; pytest's tests are at the top.
    return bool(re.search(r"(^|/)tests?/|^testing/", path)) or name.startswith("test_") \
        or name.endswith("_test.py") or name == "conftest.py"


def is_scaffold(path: str, is_new: bool) -> bool:
    """A test file, or a new file outside any package (a scratch script such as reproduce.py):
    what a patch may carry beside the change to the code, which is what gets judged and compared."""
    return is_test_path(path) or (is_new and "/" not in path)


def _strip(name: str) -> str:
    return name[2:] if name.startswith(("a/", "b/")) else name


def parse_patch(patch: str) -> list[FileChange]:
    try:
        files = PatchSet(patch)
    except UnidiffParseError as exc:
        raise PatchParseError(f"not a unified diff: {exc}") from None
    if not patch.strip() or not files:
        raise PatchParseError("not a unified diff: no file headers")
    out: list[FileChange] = []
    for pf in files:
        deleted = pf.is_removed_file
        path = _strip(pf.source_file if deleted else pf.target_file)
        added: set[int] = set()
        removed: set[int] = set()
        anchors: set[int] = set()
        for hunk in pf:
            last_source = max(hunk.source_start, 1)
            for line in hunk:
                if line.source_line_no:
                    last_source = line.source_line_no
                if line.is_added and line.target_line_no:
                    added.add(line.target_line_no)
                    anchors.add(last_source)
                elif line.is_removed and line.source_line_no:
                    removed.add(line.source_line_no)
        out.append(FileChange(path, pf.is_added_file, deleted, frozenset(added), frozenset(removed),
                              frozenset(anchors)))
    return out


_RAISE = re.compile(r"\s*raise\b")


def added_raises(patch: str) -> frozenset[tuple[str, int]]:
    """(path, line in the new file) of every line of each ``raise`` statement the patch adds (a
    statement over several lines: each of them, as the tracebacks of Pythons before 3.8 may name its
    last). Empty for text that is not a diff."""
    try:
        files = PatchSet(patch)
    except UnidiffParseError:
        return frozenset()
    out: set[tuple[str, int]] = set()
    for pf in files:
        path = _strip(pf.target_file)
        for hunk in pf:
            depth = 0  # open brackets of a raise statement still going on
            for line in hunk:
                if not (line.is_added and line.target_line_no):
                    depth = 0
                    continue
                if depth > 0 or _RAISE.match(line.value):
                    out.add((path, line.target_line_no))
                    depth = max(depth + line.value.count("(") + line.value.count("[")
                                - line.value.count(")") - line.value.count("]"), 0)
    return frozenset(out)


def base_content(wt: Worktree, path: str) -> str | None:
    """The file as the base commit has it, or None when it did not exist there."""
    proc = subprocess.run(["git", "show", f"{wt.base}:{path}"], cwd=wt.path, capture_output=True)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", errors="replace")


def check_applied(wt: Worktree, patch: str) -> str:
    """Empty when the worktree holds ``patch`` on top of the base, else why not.

    The patch is applied when its reverse applies cleanly to the working tree.
    """
    proc = subprocess.run(["git", "apply", "--check", "-R", "--whitespace=nowarn", "-"], cwd=wt.path,
                          input=patch.encode(), capture_output=True)
    if proc.returncode == 0:
        return ""
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    return f"the patch does not apply to the worktree ({lines[0] if lines else 'git apply failed'})"


@dataclass(frozen=True)
class Scope:
    qualname: str
    start: int
    end: int
    node: ast.AST


def scopes(tree: ast.AST) -> list[Scope]:
    """Every function and class with its qualified name and line span, outermost first."""
    found: list[Scope] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append(Scope(name, start, child.end_lineno or child.lineno, child))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


class SymbolMap:
    """Line number -> innermost enclosing function or class."""

    def __init__(self, source: str | None):
        self.tree: ast.Module | None = None
        self.scopes: list[Scope] = []
        if source is None:
            return
        try:
            self.tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return
        self.scopes = scopes(self.tree)

    def symbol_at(self, line: int) -> str:
        best = ""
        best_span = None
        for sc in self.scopes:
            if sc.start <= line <= sc.end and (best_span is None or sc.end - sc.start <= best_span):
                best, best_span = sc.qualname, sc.end - sc.start
        return best

    def functions_touching(self, lines: set[int] | frozenset[int]) -> list[Scope]:
        """The innermost functions (or classes, for class-level lines) holding any of ``lines``."""
        hit: dict[str, Scope] = {}
        for line in lines:
            inner: Scope | None = None
            for sc in self.scopes:
                if sc.start <= line <= sc.end and (inner is None or sc.end - sc.start <= inner.end - inner.start):
                    inner = sc
            if inner is not None:
                hit.setdefault(inner.qualname, inner)
        return sorted(hit.values(), key=lambda s: s.start)


FOCUS_ANY = "_fixgraph_any"
FOCUS_TAIL = f"\nimport typing as _fixgraph_typing\n{FOCUS_ANY}: _fixgraph_typing.Any = None\n"


def focus(source: str, keep: set[str]) -> str | None:
    """``source`` with the body of every function not in ``keep`` (qualnames) reduced to
    ``return <Any>``, line numbers unchanged, so that a type checker spends its time on the
    functions that matter. A stubbed method still assigns (to Any) every ``self.<attr>`` its body
    assigned, so the class keeps its attributes. None when ``source`` does not parse.

    Functions nested in a kept function are kept with it; a function holding a kept one is kept.
    """
    symbols = SymbolMap(source)
    if symbols.tree is None:
        return None
    lines = source.splitlines()
    replaced: list[tuple[int, int, str]] = []
    for sc in symbols.scopes:
        node = sc.node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        name = sc.qualname
        if name in keep or any(k.startswith(name + ".") for k in keep) or any(name.startswith(k + ".") for k in keep):
            continue
        if any(r[0] <= node.lineno <= r[1] for r in replaced):
            continue  # inside a function already stubbed
        first = node.body[0].lineno
        last = node.end_lineno or first
        if first <= node.lineno or any(getattr(d, "lineno", 0) >= first for d in node.decorator_list):
            continue  # a one-line def: nothing to gain
        body_line = lines[first - 1]
        indent = body_line[: len(body_line) - len(body_line.lstrip())]
        if not indent or "\t" in indent:
            continue
        selfname = node.args.args[0].arg if node.args.args else None
        attrs: list[str] = []
        if selfname:
            for sub in ast.walk(node):
                targets: list[ast.AST] = []
                if isinstance(sub, ast.Assign):
                    targets = list(sub.targets)
                elif isinstance(sub, ast.AugAssign | ast.AnnAssign):
                    targets = [sub.target]
                for t in targets:
                    for el in ast.walk(t):
                        if (isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name)
                                and el.value.id == selfname and el.attr not in attrs):
                            attrs.append(el.attr)
        stmts = [f"{selfname}.{a} = {FOCUS_ANY}" for a in attrs] + [f"return {FOCUS_ANY}"]
        replaced.append((first, last, indent + "; ".join(stmts)))
    for first, last, text in sorted(replaced, reverse=True):
        lines[first - 1: last] = [text] + [""] * (last - first)
    return "\n".join(lines) + "\n" + FOCUS_TAIL


def _code_of(source: str) -> str:
    """The module as the interpreter runs it: its AST without docstrings (the text itself when it
    does not parse, so that any edit to it counts)."""
    try:
        with astlock.LOCK:  # not thread-safe on CPython 3.11: see fixgraph/astlock.py
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def changes_code(patch: str, before: dict[str, str], after: dict[str, str]) -> bool:
    """Whether the patch changes what runs: a file other than tests and scratch scripts
    (:func:`is_scaffold`) that is not Python, new, deleted, or whose code differs once comments,
    spacing and docstrings are set aside. ``before`` and ``after`` hold the Python files' texts
    at the base and with the patch (a file missing from either is new or deleted)."""
    try:
        changes = parse_patch(patch)
    except PatchParseError:
        return bool(patch.strip())
    for c in changes:
        if c.is_scaffold:
            continue
        old, new = before.get(c.path), after.get(c.path)
        if not c.is_python or old is None or new is None or _code_of(old) != _code_of(new):
            return True
    return False
