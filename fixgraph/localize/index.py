"""Localization: which files of a repository an issue is about, and how to show them.

``RepoIndex`` is built once per (repository, commit) and cached on disk. Per-file analysis
(symbols, imports, term counts) is cached by git blob id, so two commits of the same repository
share almost all of it. Everything here is deterministic: the same issue on the same commit gives
the same ranking, map and views, which keeps the Planner's prompt reproducible and testable.

Files that are symlinks, binary, over 1 MB or not text are listed (so ``exists`` and ``nearest``
know them) but never read; a symlink is never followed, wherever it points.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import gc
import heapq
import json
import math
import os
import re
import subprocess
import threading
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np
import orjson

from fixgraph.records import atomic_write, file_lock, open_wal
from fixgraph.terms import _CAMEL, _WORD, STOP, split_identifier, terms_of  # noqa: F401
from fixgraph.workspace import Worktree, content_key

if TYPE_CHECKING:
    from fixgraph.history import HistoryView

MAX_FILE_BYTES = 1_000_000
# The ranking, one formula (README, "Localization"):
#
#   score(f) = penalty(f) * (today(f) + max today * (W_HISTORY * H(f) / max H
#                                                    + W_COCHANGE * C(f) / max C + W_LITERAL * L(f) / max L
#                                                    + W_TESTS * T(f) / max T + W_TITLE * Ti(f) / max Ti
#                                                    + W_PROSE * P(f) / max P
#                                                    + W_TEST_COCHANGE * TC(f) / max TC
#                                                    + W_EXECUTED * E(f) / max E))
#
# then the LITERAL_TOP best files are put in order again with W_LITERAL_TOP * L(f) / max L (scaled
# and penalized the same way) added to their scores: the quoted literals reorder the files the
# formula already chose, they never bring one in from below.
#
# (each added signal normalized to its best file and scaled to today's best score, so that its
# weight means the same on every issue). A learned re-ranking of the top 8 (fixgraph/rerank.py)
# can follow; it is off (``rerank.COEF`` empty): cross-validated it was not a stable gain.
# today(f): W_LEXICAL x BM25 over file contents (normalized to the best file) + W_DEF per name the
#   issue uses that f defines + bonuses for dotted names, paths and traceback frames written in the
#   issue, and for f's own name said in it.
# H(f): files touched by past commits (ancestors of the base only) whose messages resemble the
#   issue, each commit weighted by its match, recency and focus (fixgraph/history.py).
# C(f): co-change with the CO_SEEDS files ``today`` ranks highest, weighted by their score.
# L(f): the issue quotes f's string literals verbatim (an error message, a warning, an option
#   name: pieces between placeholders, see ``is_message``); each piece weighs
#   log(1 + code files / files saying it).
# T(f): f is the module one of the TEST_SEEDS test files ``today`` ranks highest is named after
#   (``tests/test_f.py``), each test handing on its score relative to the best test's
#   (``RepoIndex._tested``): issues describe behaviour the way tests exercise it.
# TC(f): f is a code file that changed with one of the TEST_SEEDS test files ``today`` ranks highest
#   in focused commits before the base (``HistoryView.co_changed``), each test handing on its score
#   relative to the best test's (``RepoIndex._test_cochange``): where T(f) finds the module a test
#   is named after, TC(f) finds the module the test's past fixes changed with it.
# E(f): execution evidence (``execution_signal``): the issue's own code, run at the base commit in
#   the sandboxed test environment (scoring/issue_run.py), called f's functions first in a later
#   statement than its setup: how late, from 0 (the first traced statement) to 1 (the last). The
#   setup (building the objects) runs the core every snippet runs; the call the issue is about
#   reaches the code it is about. Absent when the issue has no runnable code or no env (then the
#   ranking is the text's alone, and the record says why).
# Ti(f): BM25 of the title (its first line) alone.
# P(f): BM25 of the issue without its code blocks (the description, not the pasted output).
# penalty(f): 0.2 for tests, 0.4 for docs and non-Python files, else 1.
# W_LEXICAL, W_DEF, DEF_REPEAT, DEF_SPREAD were picked by a small grid on the Lite instances
# (before history existed). W_HISTORY, W_TESTS, W_TITLE, W_PROSE, W_TEST_COCHANGE and W_LITERAL_TOP
# are searched together (eval.localization_bench's GRID) and the point best on all nine repositories
# is shipped; the benchmark reports beside it the recall when each repository is ranked with the
# point best on the other eight (leave one repository out; ties to the better mean recall@1..10,
# then to the smaller weights); seven folds of nine chose the shipped point (seventh pass; the fold
# without pytest a test co-change weight of 0.1, the one without flask a history weight of 0.2).
# The test co-change replaces the tests-to-source names (W_TESTS 0 in every fold once it is in).
# With the title
# and the prose in, the history signal gets weight 0: on these
# instances the files past fixes point at are the files the title already points at (README,
# "Localization"); it is still computed for the benchmark's ``hist`` column and the re-ranking.
# Cross-validated, the literal signal did not help as a term of the formula (it gains at rank 1 and
# costs at rank 8: a file quoting a common message climbs from far below into the top 8), so
# W_LITERAL stays 0; applied to the top 8 only (W_LITERAL_TOP) it gains five instances at rank 1
# and loses none, and every fold chooses it (sixth pass). Co-change gets weight 0 in eight folds of nine.
# A centrality prior (log of how many files import a module) and a change-frequency prior
# (recency-weighted count of focused commits touching a file) were tried and gained nothing at any
# weight (dev runs), so they are not used; nor were, in the third pass, the modules the top files
# import or that import them, the modules the docs' autodoc directives name, or the files defining
# ``_print_X``-style handlers of the classes the issue names (dev runs over the 140 instances: none
# moved the cross-validated recall).
W_LEXICAL = 16.0  # BM25 over file contents, normalized to the best file's score
W_DEF = 1.5  # a file defines a name the issue uses
DEF_REPEAT = 0.3  # how much repeating a name in the issue adds (log-damped)
DEF_SPREAD = 0.5  # names defined in many files count less: weight / files ** DEF_SPREAD
W_HISTORY = 0.0
W_COCHANGE = 0.0
W_LITERAL = 0.0
W_TESTS = 0.0  # the test co-change below does its work better (seventh pass)
W_TITLE = 0.8
W_PROSE = 0.2
W_TEST_COCHANGE = 0.5
# The quoted literals as the ranking's last step: they reorder the LITERAL_TOP files (the Explorer's
# first reads, what recall@8 counts), so they can decide which of them is first but not which are in.
W_LITERAL_TOP = 1.0
# Execution evidence (issue 18, ninth pass): chosen by the benchmark's grid with the others.
W_EXECUTED = 1.0
LITERAL_TOP = 8
CO_SEEDS = 5
TEST_SEEDS = 5  # the test files whose subjects get the tests-to-source signal
INDEX_VERSION = 5
PY_SUFFIXES = (".py", ".pyi")
# Text files worth indexing besides Python: docs, configs, templates a fix may touch.
TEXT_SUFFIXES = (".py", ".pyi", ".rst", ".txt", ".md", ".cfg", ".toml", ".ini", ".yaml", ".yml",
                 ".json", ".html", ".css", ".js", ".jinja", ".j2", ".c", ".h", ".pyx", ".pxd",
                 ".sh", ".in", ".conf", ".tex")
# A class in focus longer than this is outlined (own statements, method signatures), not shown whole.
BIG_CLASS_LINES = 80
CONFIG_NAMES = ("setup.cfg", "pyproject.toml", "setup.py", "tox.ini", "pytest.ini", "conftest.py",
                ".coveragerc", "MANIFEST.in")


# ---- token counting -----------------------------------------------------------------------

def count_tokens(text: str) -> int:
    """A cheap deterministic estimate of a prompt's size in tokens.

    tiktoken needs its encoding files fetched at run time, which offline machines cannot do, so
    every budget in fixgraph uses this one estimate instead. Characters / 3.5 is slightly above
    cl100k's count for Python source (about 3.6-4 characters a token), so budgets err on the safe side.
    """
    return (len(text) * 2 + 6) // 7


# ---- tokenizing identifiers and prose -----------------------------------------------------

# Tokenizing lives in fixgraph/terms.py, shared with the history index below this module.


# ---- per-file analysis ---------------------------------------------------------------------

@dataclass
class Symbol:
    name: str
    qualname: str
    kind: str  # class | def
    start: int
    end: int
    header_end: int  # last line of the signature
    doc: str = ""


@dataclass
class FileInfo:
    path: str
    size: int = 0
    lines: int = 0
    readable: bool = False  # text under 1 MB, not a symlink
    symbols: list[Symbol] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # dotted module names, absolute
    stmts: list[tuple[int, int, bool]] = field(default_factory=list)  # module-level (start, end, is_doc)
    messages: list[str] = field(default_factory=list)  # message-like pieces of its string literals
    terms: dict[str, int] = field(default_factory=dict)
    length: int = 0  # number of terms


def _decode(data: bytes) -> str | None:
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # Non-UTF-8 text (latin-1 sources exist in old repos): keep it readable, mark nothing.
        return data.decode("utf-8", errors="replace")


# Paths here come from git: relative, "/"-separated, normalized. Splitting the string is what
# PurePosixPath would do, at a fraction of the cost over the thousands of files of every query.

def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p and p != "."]


def _stem(name: str) -> str:
    """``PurePosixPath(name).stem`` for a file name."""
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name


def _module_of(path: str) -> str:
    parts = _parts(path)
    if parts:
        parts[-1] = _stem(parts[-1])
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _analyze_python(path: str, text: str) -> tuple[list[Symbol], list[str], list[tuple[int, int, bool]], list[str]]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _regex_symbols(text), _regex_imports(text), [], []
    symbols: list[Symbol] = []
    lines = text.splitlines()

    def visit(node: ast.AST, prefix: str, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                qual = f"{prefix}{child.name}"
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                doc = ast.get_docstring(child, clean=True) or ""
                symbols.append(Symbol(child.name, qual, kind, start, child.end_lineno or child.lineno,
                                      _header_end(lines, child.lineno),
                                      doc.strip().split("\n")[0][:160]))
                if depth < 2:
                    visit(child, qual + ".", depth + 1)
            elif isinstance(child, ast.If | ast.Try | ast.With) and depth == 0:
                visit(child, prefix, depth)

    visit(tree, "", 0)
    stmts: list[tuple[int, int, bool]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        is_doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        stmts.append((node.lineno, node.end_lineno or node.lineno, is_doc))
    imports: list[str] = []
    package = _module_of(path)
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg_parts = package.split(".") if package else []
                keep = len(pkg_parts) - (node.level - 1)
                if keep < 0:
                    continue
                base = ".".join(pkg_parts[:keep] + ([base] if base else []))
            if not base:
                continue
            imports.append(base)
            imports.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return symbols, list(dict.fromkeys(imports)), stmts, _messages(tree)


# Pieces of a string literal between its placeholders: what a user sees of an error message or
# a warning once the values are filled in, and so what an issue quoting that output contains.
_PLACEHOLDER_RE = re.compile(r"%\(\w+\)[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]|%[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]"
                             r"|\{[^{}]*\}|[\r\n\t]")
# Command-line options and dashed names (``--collect-only``, pylint's ``unused-import``): short,
# but said verbatim by users.
_OPTION_RE = re.compile(r"--?[A-Za-z][\w-]+|[a-z]+(?:-[a-z]+)+")
MAX_MESSAGES = 400  # per file: a table of thousands of strings is data, not messages
MAX_MESSAGE_CHARS = 200


def is_message(piece: str) -> bool:
    """Worth matching against an issue: a phrase of two words or more, or an option name."""
    if _OPTION_RE.fullmatch(piece):
        return True
    return " " in piece and len(piece) >= 12 and len(re.findall(r"[A-Za-z]{2,}", piece)) >= 2


def _messages(tree: ast.AST) -> list[str]:
    docs: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docs.add(id(body[0].value))
    out: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for piece in _PLACEHOLDER_RE.split(node.value):
                piece = piece.strip()[:MAX_MESSAGE_CHARS]
                if is_message(piece):
                    out[piece] = None
                    if len(out) >= MAX_MESSAGES:
                        return list(out)
    return list(out)


def _header_end(lines: list[str], lineno: int) -> int:
    """The line where a def or class signature ends (its colon), at most 30 lines on."""
    depth = 0
    for n in range(lineno, min(len(lines), lineno + 30) + 1):
        code = lines[n - 1].split("#")[0].rstrip()
        depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
        if depth <= 0 and code.endswith(":"):
            return n
    return lineno


_DEF_RE = re.compile(r"^(\s*)(?:async\s+)?(def|class)\s+([A-Za-z_]\w*)", re.M)
_IMPORT_RE = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)


def _regex_symbols(text: str) -> list[Symbol]:
    out: list[Symbol] = []
    for m in _DEF_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        kind = "class" if m.group(2) == "class" else "def"
        out.append(Symbol(m.group(3), m.group(3), kind, line, line, line))
    return out


def _regex_imports(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(1) or m.group(2) for m in _IMPORT_RE.finditer(text)))


def analyze(path: str, data: bytes | None, size: int) -> FileInfo:
    info = FileInfo(path=path, size=size)
    if data is None or size > MAX_FILE_BYTES:
        return info
    text = _decode(data)
    if text is None:
        return info
    info.readable = True
    info.lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if path.endswith(PY_SUFFIXES):
        info.symbols, info.imports, info.stmts, info.messages = _analyze_python(path, text)
    if path.endswith(TEXT_SUFFIXES) or "." not in PurePosixPath(path).name:
        counts = Counter(terms_of(text))
        info.terms = dict(counts)
        info.length = sum(counts.values())
    return info


def _info_to_json(info: FileInfo) -> dict:
    return {"size": info.size, "lines": info.lines, "readable": info.readable,
            "symbols": [[s.name, s.qualname, s.kind, s.start, s.end, s.header_end, s.doc] for s in info.symbols],
            "imports": info.imports, "stmts": info.stmts, "terms": info.terms, "length": info.length,
            "messages": info.messages}


def _info_from_json(path: str, d: dict) -> FileInfo:
    return FileInfo(path=path, size=d["size"], lines=d["lines"], readable=d["readable"],
                    symbols=[Symbol(*s) for s in d["symbols"]], imports=d["imports"],
                    stmts=[(a, b, bool(c)) for a, b, c in d["stmts"]],
                    terms=d.get("terms", {}), length=d["length"], messages=d.get("messages", []))


# ---- where file contents come from ------------------------------------------------------

@dataclass
class Entry:
    path: str
    mode: str
    sha: str
    size: int


class _Source:
    """A repository tree at one commit: its entries and a way to read blobs."""

    key: str

    def entries(self) -> list[Entry]:
        raise NotImplementedError

    def read_many(self, entries: list[Entry]) -> dict[str, bytes]:
        raise NotImplementedError


class _WorktreeSource(_Source):
    def __init__(self, wt: Worktree):
        self.wt = wt
        self.key = wt.base

    def entries(self) -> list[Entry]:
        out = self.wt.repo.git.ls_files("-s", "-z")
        entries: list[Entry] = []
        for rec in out.split("\x00"):
            if not rec:
                continue
            meta, _, path = rec.partition("\t")
            mode, sha, _stage = meta.split()
            full = self.wt.path / path
            try:
                size = full.lstat().st_size
            except OSError:
                continue
            entries.append(Entry(path, mode, sha, size))
        return entries

    def read_many(self, entries: list[Entry]) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for e in entries:
            full = self.wt.path / e.path
            # Never follow a link; Worktree.resolve refuses anything that lands outside.
            if full.is_symlink() or e.mode == "120000":
                continue
            try:
                if not self.wt.resolve(e.path).is_file():
                    continue
                out[e.path] = full.read_bytes()
            except Exception:  # unreadable files are simply not indexed
                continue
        return out


class _GitSource(_Source):
    """Blobs straight from a (bare) repository at a commit: no checkout needed."""

    def __init__(self, git_dir: Path, commit: str):
        self.git_dir = git_dir
        self.commit = commit
        self.key = commit

    def _git(self, *args: str, data: bytes | None = None) -> bytes:
        proc = subprocess.run(["git", "--git-dir", str(self.git_dir), *args], input=data,
                              capture_output=True, check=True)
        return proc.stdout

    def entries(self) -> list[Entry]:
        out = self._git("ls-tree", "-r", "-l", "-z", "--full-tree", self.commit)
        entries: list[Entry] = []
        for rec in out.decode("utf-8", errors="replace").split("\x00"):
            if not rec:
                continue
            meta, _, path = rec.partition("\t")
            mode, kind, sha, size = meta.split()
            if kind != "blob":
                continue
            entries.append(Entry(path, mode, sha, int(size) if size.isdigit() else 0))
        return entries

    def read_many(self, entries: list[Entry]) -> dict[str, bytes]:
        wanted = [e for e in entries if e.mode != "120000" and e.size <= MAX_FILE_BYTES]
        if not wanted:
            return {}
        raw = self._git("cat-file", "--batch", data="".join(e.sha + "\n" for e in wanted).encode())
        out: dict[str, bytes] = {}
        pos = 0
        for e in wanted:
            nl = raw.index(b"\n", pos)
            header = raw[pos:nl].split()
            pos = nl + 1
            if len(header) < 3 or header[1] == b"missing":
                continue
            n = int(header[2])
            out[e.path] = raw[pos:pos + n]
            pos += n + 1
        return out


# ---- the blob cache -----------------------------------------------------------------------

class _BlobCache:
    """Per-blob analyses in SQLite, shared by every commit and process."""

    def __init__(self, path: Path):
        self.db = open_wal(path, lambda db: db.execute(
            "CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, data BLOB)"))

    def get_many(self, keys: list[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, data FROM blobs WHERE key IN ({','.join('?' * len(chunk))})"
            for key, data in self.db.execute(q, chunk):
                out[key] = orjson.loads(zlib.decompress(data))
        return out

    def put_many(self, items: dict[str, dict]) -> None:
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO blobs VALUES (?, ?)",
                                [(k, zlib.compress(orjson.dumps(v), 1)) for k, v in items.items()])

    def close(self) -> None:
        self.db.close()


# ---- the query: what the issue text names -------------------------------------------------

_PATH_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|pyi|rst|cfg|toml|ini|txt|html|css|js|c|h|pyx))\b")
# Traceback frames as Python prints them, and as IPython (``File ~/x/y.py:841, in Plot._plot(self)``;
# older: ``/x/y.py in func(args)``) and pytest (``src/x/y.py:123: in func``) print them.
_TB_RES = (re.compile(r'File "([^"]+)", line (\d+)(?:, in (\w+))?'),
           re.compile(r'File (~?[^\s,"]+\.pyx?):(\d+), in (?:\w+\.)*(\w+)'),
           re.compile(r'^[ \t]*(\S+\.pyx?) in ()(?:\w+\.)*(\w+)\(', re.M),
           re.compile(r'^(\S+\.pyx?):(\d+): (?:in (\w+))?', re.M))
# Dashed names (``--recursive``, ``ignore-paths``, ``import-mode``) are read by the code as
# ``ignore_paths`` or ``importmode``: the query gets those spellings too.
_DASHED_RE = re.compile(r"(?<![\w-])-{0,2}([a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)+)(?![\w-])")
_DOTTED_RE = re.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\b")
_BACKTICK_RE = re.compile(r"`([^`\n]{1,120})`")
_CODE_BLOCK_RE = re.compile(r"```.*?```|(?:^(?: {4}|\t|>>> |\.\.\. ).*$\n?)+", re.S | re.M)


_FILE_EXTS = frozenset("py pyi pyc rst txt md cfg toml ini html css js json yaml yml c h pyx inc log sh png svg".split())
_CODE_POS_RE = re.compile(r"(?<=\.)([A-Za-z_]\w*)|\b([A-Za-z_]\w*)(?=\()|\b(?:import|def|class)\s+([A-Za-z_]\w*)")


def _looks_code(word: str) -> bool:
    return ("_" in word.strip("_") or re.search(r"[a-z][A-Z]", word) is not None
            or (word[0].isupper() and any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)))


@dataclass
class Query:
    paths: list[str]
    frames: list[tuple[str, str]]  # (path as written, function)
    dotted: list[str]
    idents: Counter[str]  # identifiers that look like code (exact case)
    terms: Counter[str]


def parse_problem(problem: str) -> Query:
    found = sorted((m.start(), m.group(1), m.group(3) or "") for rx in _TB_RES for m in rx.finditer(problem))
    frames = [(path, func) for _, path, func in found]
    paths = list(dict.fromkeys(m.group(1) for m in _PATH_RE.finditer(problem)))
    # File names (conf.py, index.rst) are paths, not dotted names.
    dotted = list(dict.fromkeys(m.group(1) for m in _DOTTED_RE.finditer(problem)
                                if not re.fullmatch(r"[\d.]+", m.group(1))
                                and m.group(1).rpartition(".")[2] not in _FILE_EXTS))
    idents: Counter[str] = Counter()
    # Code-shaped words anywhere: snake_case, camelCase, CapWords with inner capitals.
    for word in _WORD.findall(problem):
        if _looks_code(word) and len(word) > 2:
            idents[word] += 1
    # In backticks every name is deliberate; in code blocks (which also hold logs and output)
    # only names in code positions count: called, an attribute, imported, defined.
    for word in _WORD.findall(" ".join(_BACKTICK_RE.findall(problem))):
        if len(word) > 2 and word.lower() not in STOP and not _looks_code(word):
            idents[word] += 1
    for block in _CODE_BLOCK_RE.findall(problem):
        for m in _CODE_POS_RE.finditer(block):
            word = next(g for g in m.groups() if g)
            if len(word) > 2 and word.lower() not in STOP and not _looks_code(word):
                idents[word] += 1
    for d in dotted:
        for part in d.split("."):
            if len(part) > 2 and part.lower() not in STOP:
                idents[part] += 1
    for _, func in frames:
        if func and func != "module":
            idents[func] += 2
    terms = Counter(terms_of(problem))
    for dashed in _DASHED_RE.findall(problem):
        terms[dashed.replace("-", "_")] += 1
        terms[dashed.replace("-", "")] += 1
    return Query(paths, frames, dotted, idents, terms)


# ---- the index ----------------------------------------------------------------------------

@dataclass
class Candidate:
    path: str
    score: float
    symbols: list[str]


@dataclass
class Option:
    path: str
    why: str  # "imported by X", "tests of X", "config", "calls Y"


@functools.lru_cache(maxsize=1 << 16)
def is_test_path(path: str) -> bool:
    parts = _parts(path)
    name = parts[-1] if parts else ""
    return (any(p in ("tests", "test", "testing") for p in parts[:-1]) or name.startswith("test_")
            or name.endswith("_test.py") or name == "conftest.py")


def _is_doc_path(path: str) -> bool:
    parts = _parts(path)
    return bool(parts) and parts[0] in ("doc", "docs", "examples", "example", "benchmarks", "bench")


class LocalizeError(Exception):
    """The repository cannot be indexed at this commit; one line for the user."""


@dataclass
class RankParts:
    """The ranking's signals for one issue, before they are combined (see ``combine``)."""

    today: dict[str, float]
    why: dict[str, list[str]]
    history: dict[str, float]
    cochange: dict[str, float]
    literal: dict[str, float] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)
    # ``today`` taken apart, and the evidence only the learned re-ranking reads (fixgraph/rerank.py).
    lexical: dict[str, float] = field(default_factory=dict)  # BM25, relative to the best file
    defs: dict[str, float] = field(default_factory=dict)  # defines names the issue uses
    written: dict[str, float] = field(default_factory=dict)  # dotted names, paths, traceback frames
    named: dict[str, float] = field(default_factory=dict)  # the file's own name said in the issue
    api: dict[str, float] = field(default_factory=dict)  # defines public API the issue names
    handler: dict[str, float] = field(default_factory=dict)  # ``_print_X``-style methods of named classes
    hist_api: dict[str, float] = field(default_factory=dict)  # past fixes whose messages name the same code
    title: dict[str, float] = field(default_factory=dict)  # BM25 of the title alone
    prose: dict[str, float] = field(default_factory=dict)  # BM25 of the issue without its code blocks
    test_cochange: dict[str, float] = field(default_factory=dict)  # changed with the tests the issue matches
    executed: dict[str, float] = field(default_factory=dict)  # the code called it late (``execution_signal``)


def execution_signal(first: Mapping[str, int]) -> dict[str, float]:
    """E(f) of the formula: for each file the issue's code called, how late it was first called,
    from the statement index of its first call (``first``, as ``scoring.issue_run`` records it):
    0 for the earliest traced statement, 1 for the last; files at 0 are left out. One statement
    (or one file) says nothing about order: no signal."""
    if not first:
        return {}
    lo, hi = min(first.values()), max(first.values())
    if hi <= lo:
        return {}
    return {path: (n - lo) / (hi - lo) for path, n in first.items() if n > lo}


@functools.lru_cache(maxsize=1 << 16)
def penalty(path: str) -> float:
    """The ranking's multiplier for where a file lives."""
    if is_test_path(path):
        # Fixes live in the code; tests are offered to the Explorer as options instead.
        return 0.2
    if _is_doc_path(path) or not path.endswith(PY_SUFFIXES):
        return 0.4
    return 1.0


def combine(parts: RankParts, w_history: float, w_cochange: float, w_literal: float,
            w_tests: float = 0.0, w_title: float = 0.0, w_prose: float = 0.0,
            w_test_cochange: float = 0.0, w_literal_top: float = 0.0, w_executed: float = 0.0, *,
            k: int | None = None) -> list[Candidate]:
    """The one ranking formula (module header): every signal weighted, then the penalty, then the
    quoted literals reorder the top ``LITERAL_TOP`` (``literal_first``). With ``k`` only the
    ``max(k, LITERAL_TOP)`` best are returned (the same files, in the same order, as a full ranking
    cut there: the benchmark's weight grid asks for thousands of rankings)."""
    score: dict[str, float] = defaultdict(float, parts.today)
    scale = max(parts.today.values(), default=0.0) or 1.0
    for signal, weight in ((parts.history, w_history), (parts.cochange, w_cochange), (parts.literal, w_literal),
                           (parts.tests, w_tests), (parts.title, w_title), (parts.prose, w_prose),
                           (parts.test_cochange, w_test_cochange), (parts.executed, w_executed)):
        best = max(signal.values(), default=0.0)
        if weight and best > 0:
            for path, s in signal.items():
                score[path] += scale * weight * s / best
    scored = [(-round(s * penalty(path), 6), path) for path, s in score.items()]
    if k is None:
        scored.sort()
    else:
        scored = heapq.nsmallest(max(k, LITERAL_TOP), scored)
    ranked = [Candidate(path, -neg, list(dict.fromkeys(parts.why.get(path, [])))[:8]) for neg, path in scored]
    return literal_first(parts, ranked, w_literal_top)


def literal_first(parts: RankParts, ranked: list[Candidate], weight: float) -> list[Candidate]:
    """``ranked`` with its ``LITERAL_TOP`` best files ordered again, each one's score raised by
    ``weight`` x its quoted-literal score (relative to the best file's, scaled to today's best score,
    with the penalty). Only their order changes: the set of the top ``LITERAL_TOP`` stays the
    formula's, since a message quoted in an issue is often said in several files, and pulling one
    in from far below costs more than it brings (fourth pass)."""
    best = max(parts.literal.values(), default=0.0)
    if not weight or best <= 0:
        return ranked
    scale = max(parts.today.values(), default=0.0) or 1.0
    head = [Candidate(c.path, round(c.score + scale * weight * parts.literal.get(c.path, 0.0) / best
                                    * penalty(c.path), 6), c.symbols)
            for c in ranked[:LITERAL_TOP]]
    head.sort(key=lambda c: (-c.score, c.path))
    return head + ranked[LITERAL_TOP:]


@dataclass
class Postings:
    """Term -> (file, count) for every file of a commit, as arrays (a compressed sparse row)."""

    vocab: dict[str, int]
    files: list[str]  # the files with terms; ``file`` below indexes this list
    ptr: np.ndarray  # term t's rows are ptr[t]:ptr[t + 1]
    file: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, infos: dict[str, FileInfo]) -> Postings:
        files = [p for p in sorted(infos) if infos[p].terms]
        rows: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, path in enumerate(files):
            for term, n in infos[path].terms.items():
                rows[term].append((i, n))
        vocab = sorted(rows)
        ptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(rows[t]) for t in vocab])
        flat = [pair for t in vocab for pair in rows[t]]
        pairs = np.array(flat, dtype=np.int64).reshape(-1, 2)
        return cls({t: i for i, t in enumerate(vocab)}, files, ptr,
                   pairs[:, 0].astype(np.int32), np.minimum(pairs[:, 1], 65535).astype(np.uint16))

    def get(self, term: str) -> list[tuple[str, int]]:
        t = self.vocab.get(term)
        if t is None:
            return []
        lo, hi = int(self.ptr[t]), int(self.ptr[t + 1])
        files = self.files
        return [(files[i], n) for i, n in zip(self.file[lo:hi].tolist(), self.count[lo:hi].tolist(), strict=True)]


def _write_snapshot(path: Path, infos: dict[str, FileInfo]) -> None:
    post = Postings.of(infos)
    meta = {"vocab": sorted(post.vocab, key=post.vocab.__getitem__), "files": post.files,
            "infos": {p: {k: v for k, v in _info_to_json(info).items() if k != "terms"} for p, info in infos.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Threads of one process may build the same commit: the temporary name is unique per writer.
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
    try:
        np.savez(tmp, meta=np.frombuffer(zlib.compress(orjson.dumps(meta), 1), dtype=np.uint8),
                 ptr=post.ptr, rows=post.file, count=post.count)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk costs the speed-up, not the index


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a snapshot's ~10^5 objects are made: none of them is
    garbage yet, and the collector's passes over them were a third of the load time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_snapshot(path: Path, entries: list[Entry]) -> tuple[dict[str, FileInfo], Postings] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = orjson.loads(zlib.decompress(z["meta"].tobytes()))
            ptr, file, count = z["ptr"], z["rows"], z["count"]
    except (OSError, ValueError, KeyError, zlib.error, orjson.JSONDecodeError):
        return None
    raw = meta["infos"]
    if len(raw) != len(entries) or any(e.path not in raw for e in entries):
        return None
    infos = {p: _info_from_json(p, d) for p, d in raw.items()}
    return infos, Postings({t: i for i, t in enumerate(meta["vocab"])}, meta["files"], ptr, file, count)


class RepoIndex:
    def __init__(self, source: _Source, entries: list[Entry], infos: dict[str, FileInfo],
                 postings: Postings | None = None):
        self.source = source
        self.entries = {e.path: e for e in entries}
        self.infos = infos
        # From the snapshot; without one (it could not be written) terms are looked up file by file.
        self._term_index = postings
        self.paths = sorted(self.entries)
        self._files = {p for p, e in self.entries.items() if e.mode != "120000"}
        # Set by ``attach_history``; without it the ranking is today's signals alone.
        self.history: HistoryView | None = None
        self.history_note = "history: not loaded"
        # Set by ``attach_execution``: what the issue's own code ran (``execution_signal``).
        self.execution: dict[str, float] = {}
        self.execution_note = "execution: not run"
        self._execution_key = ""
        # The Planner and each Explorer iteration rank the same issue: compute its signals once.
        self._parts_memo: tuple[str, RankParts] | None = None
        self._messages: tuple[int, dict[str, list[str]]] | None = None  # code files, piece -> files
        self._lengths: np.ndarray | None = None  # terms per file, in the snapshot's file order
        self._exports: dict[str, list[str]] | None = None  # see ``exports``
        self._handler_map: dict[str, list[str]] | None = None  # class name -> files with its handlers
        self._read_ahead: dict[str, bytes] = {}  # see ``read_ahead``
        self._prepare()

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def build(cls, wt: Worktree, cache_dir: Path, history: bool = True) -> RepoIndex:
        """The index of ``wt`` at its base commit, from the cache when built before."""
        index = cls._build(_WorktreeSource(wt), cache_dir)
        if history:
            common = wt.repo.git.rev_parse("--git-common-dir")
            index.attach_history((wt.path / common).resolve(), wt.base, cache_dir)
        return index

    @classmethod
    def build_from_git(cls, git_dir: Path, commit: str, cache_dir: Path, history: bool = True) -> RepoIndex:
        """The same, reading blobs from a (bare) repository: no worktree needed."""
        probe = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
                               capture_output=True, check=False)
        if probe.returncode != 0:
            raise LocalizeError(f"base commit {commit} is not in {git_dir}")
        index = cls._build(_GitSource(git_dir, commit), cache_dir)
        if history:
            index.attach_history(git_dir, commit, cache_dir)
        return index

    def attach_history(self, git_dir: Path, base: str, cache_dir: Path) -> None:
        """Use the repository's history before ``base`` in the ranking (see ``fixgraph.history``)."""
        from fixgraph.history import HistoryError, history_status

        try:
            self.history, self.history_note = history_status(git_dir, base, cache_dir)
            self._parts_memo = None
        except HistoryError as exc:
            raise LocalizeError(str(exc)) from None

    def attach_execution(self, signal: dict[str, float], note: str) -> None:
        """Use execution evidence (``execution_signal`` of the issue's traced run) in the ranking."""
        self.execution = {p: s for p, s in signal.items() if p in self.entries and s > 0}
        self.execution_note = note
        self._execution_key = content_key(json.dumps(sorted(self.execution.items())))
        self._parts_memo = None

    @classmethod
    def _build(cls, source: _Source, cache_dir: Path) -> RepoIndex:
        base = cache_dir / "localize"
        tree_file = base / "trees" / f"{content_key(str(INDEX_VERSION), source.key)}.json"
        entries: list[Entry] | None = None
        if tree_file.is_file():
            try:
                entries = [Entry(*row) for row in json.loads(tree_file.read_text())]
            except (ValueError, TypeError):
                entries = None
        if entries is None:
            entries = source.entries()
            atomic_write(tree_file, json.dumps([[e.path, e.mode, e.sha, e.size] for e in entries]))
        # The commit's whole analysis in one file, terms as an inverted index: a warm load reads
        # it instead of decoding every file's term counts (most of the load time on sympy).
        snap_file = base / "snapshots" / f"{content_key(str(INDEX_VERSION), 'snapshot', source.key)}.npz"
        with _gc_paused():
            loaded = _read_snapshot(snap_file, entries)
            if loaded is not None:
                return cls(source, entries, *loaded)
        cache = _BlobCache(base / "blobs.sqlite")
        try:
            def bkey(e: Entry) -> str:
                # The analysis depends on the path too (suffix, relative imports).
                return f"{INDEX_VERSION}:{e.sha}:{e.path}"
            got = cache.get_many([bkey(e) for e in entries])
            missing = [e for e in entries if bkey(e) not in got]
            if missing:
                with file_lock(base / "build.lock"):
                    data = source.read_many(missing)
                    fresh: dict[str, dict] = {}
                    for e in missing:
                        blob = data.get(e.path)
                        info = analyze(e.path, blob, e.size) if e.mode != "120000" else FileInfo(e.path, e.size)
                        fresh[bkey(e)] = _info_to_json(info)
                    cache.put_many(fresh)
                    got.update(fresh)
        finally:
            cache.close()
        infos = {e.path: _info_from_json(e.path, got[bkey(e)]) for e in entries}
        _write_snapshot(snap_file, infos)
        loaded = _read_snapshot(snap_file, entries)
        return cls(source, entries, *loaded) if loaded else cls(source, entries, infos)

    def _prepare(self) -> None:
        # Inverted indexes for ranking: terms -> files, symbol names -> defining files,
        # module names -> paths.
        self._postings: dict[str, list[tuple[str, int]]] = {}
        with_terms = (set(self._term_index.files) if self._term_index is not None
                      else {p for p in self.paths if self.infos[p].terms})
        self.defs: dict[str, list[str]] = defaultdict(list)
        self.modules: dict[str, str] = {}
        total = 0
        n = 0
        for path in self.paths:
            info = self.infos[path]
            if path in with_terms:
                n += 1
                total += info.length
            for sym in info.symbols:
                lst = self.defs[sym.name]
                if not lst or lst[-1] != path:
                    lst.append(path)
            if path.endswith(PY_SUFFIXES):
                mod = _module_of(path)
                self.modules.setdefault(mod, path)
                first, _, rest = mod.partition(".")
                # src/ and lib/ layouts: the import name drops the non-package root.
                if rest and f"{first}/__init__.py" not in self.entries:
                    self.modules.setdefault(rest, path)
        self.n_docs = max(n, 1)
        self.avg_len = total / self.n_docs if n else 1.0
        self.by_name: dict[str, list[str]] = defaultdict(list)
        self._packages: dict[str, list[str]] = defaultdict(list)  # package name -> its __init__.py
        for path in self.paths:
            head, _, name = path.rpartition("/")
            self.by_name[name].append(path)
            if name == "__init__.py" and head:
                self._packages[head.rpartition("/")[2]].append(path)

    # -- small queries -----------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return clean_path(path) in self._files

    def nearest(self, path: str, n: int = 5) -> list[str]:
        """The real paths closest to a wrong one: same file name first, then by similarity."""
        want = clean_path(path)
        name = PurePosixPath(want).name
        same = sorted(self.by_name.get(name, []),
                      key=lambda p: (-difflib.SequenceMatcher(None, want, p).ratio(), p))
        pool = [p for p in self.paths if p.endswith(PY_SUFFIXES)] or self.paths
        close = difflib.get_close_matches(want, pool, n=n * 2, cutoff=0.3)
        stem = PurePosixPath(want).stem.lower()
        by_stem = [p for p in pool if stem and stem in PurePosixPath(p).stem.lower()]
        by_stem.sort(key=lambda p: (-difflib.SequenceMatcher(None, want, p).ratio(), p))
        return list(dict.fromkeys(same + close + by_stem))[:n]

    def posting(self, term: str) -> list[tuple[str, int]]:
        """(path, count) of every file whose text has ``term``."""
        hit = self._postings.get(term)
        if hit is None:
            if self._term_index is not None:
                hit = self._term_index.get(term)
            else:
                infos = self.infos
                hit = [(p, infos[p].terms[term]) for p in self.paths if term in infos[p].terms]
            self._postings[term] = hit
        return hit

    def module_path(self, dotted: str) -> str | None:
        """The file a dotted module name refers to, trying shorter prefixes (``a.b.Class``)."""
        parts = dotted.split(".")
        while parts:
            hit = self.modules.get(".".join(parts))
            if hit:
                return hit
            parts.pop()
        return None

    def imports_of(self, path: str) -> list[str]:
        out: list[str] = []
        info = self.infos.get(path)
        if not info:
            return out
        for mod in info.imports:
            hit = self.modules.get(mod)
            if hit is None and "." in mod:
                package, _, name = mod.rpartition(".")
                hit = self.modules.get(package)
                # "from a.b import name" where a/b/__init__.py re-exports it: the file under
                # a/b/ that defines ``name`` is what the code really uses.
                if hit is not None and hit.endswith("/__init__.py"):
                    prefix = hit[: -len("__init__.py")]
                    owners = [p for p in self.defs.get(name, ()) if p.startswith(prefix) and not is_test_path(p)]
                    if len(owners) == 1:
                        hit = owners[0]
            if hit and hit != path and hit not in out:
                out.append(hit)
        return out

    # -- ranking -----------------------------------------------------------------------------

    def _bm25(self, terms: Counter[str]) -> dict[str, float]:
        k1, b = 1.2, 0.75
        post = self._term_index
        if post is not None:
            # The same sums, term by term in the same order, over arrays: a posting list of a
            # common word holds most of the repository's files.
            lengths = self._lengths
            if lengths is None:
                lengths = self._lengths = np.array([self.infos[p].length for p in post.files], dtype=np.float64)
            acc = np.zeros(len(post.files))
            hit = np.zeros(len(post.files), dtype=bool)
            for term, qtf in terms.items():
                t = post.vocab.get(term)
                if t is None:
                    continue
                lo, hi = int(post.ptr[t]), int(post.ptr[t + 1])
                if hi == lo:
                    continue
                rows = post.file[lo:hi]
                tf = post.count[lo:hi].astype(np.float64)
                df = hi - lo
                idf = math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))
                weight = idf * min(qtf, 3)
                acc[rows] += weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[rows] / self.avg_len))
                hit[rows] = True
            files = post.files
            return {files[i]: float(acc[i]) for i in np.nonzero(hit)[0].tolist()}
        scores: dict[str, float] = defaultdict(float)
        for term, qtf in terms.items():
            posting = self.posting(term)
            if not posting:
                continue
            df = len(posting)
            idf = math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))
            weight = idf * min(qtf, 3)
            for path, tf in posting:
                length = self.infos[path].length
                scores[path] += weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / self.avg_len))
        return scores

    def rank(self, problem: str, k: int = 30) -> list[Candidate]:
        """Files most likely to need changing for ``problem``, best first (deterministic)."""
        from fixgraph import rerank

        learned = bool(rerank.COEF)
        parts = self.rank_parts(problem, cochange=W_COCHANGE > 0,
                                literal=W_LITERAL > 0 or W_LITERAL_TOP > 0 or learned,
                                history=W_HISTORY > 0 or learned, evidence=learned,
                                test_cochange=W_TEST_COCHANGE > 0)
        ranked = combine(parts, W_HISTORY, W_COCHANGE, W_LITERAL, W_TESTS, W_TITLE, W_PROSE, W_TEST_COCHANGE,
                         W_LITERAL_TOP, W_EXECUTED)
        if learned:
            pool = rerank.features(parts, [(c.path, c.score) for c in ranked], penalty)
            by_path = {c.path: c for c in ranked}
            top = ranked[0].score if ranked else 0.0
            # The pool above the rest in the model's order, scores still decreasing down the list.
            head = [Candidate(p, round(top + len(pool) - i, 6), by_path[p].symbols)
                    for i, p in enumerate(rerank.order(pool, rerank.COEF))]
            ranked = head + ranked[len(head):]
        return ranked[:k]

    def rank_parts(self, problem: str, cochange: bool = True, literal: bool = True, history: bool = True,
                   evidence: bool = True, test_cochange: bool = True) -> RankParts:
        """Each signal of the ranking for ``problem``, before weighting (co-change, quoted literals,
        the history, co-change with the matching tests and the re-ranking's own evidence only if
        asked: a zero weight does not need them, and they cost time)."""
        memo_key = (f"{int(cochange)}{int(literal)}{int(history)}{int(evidence)}{int(test_cochange)}"
                    f"{self._execution_key}{problem}")
        if self._parts_memo is not None and self._parts_memo[0] == memo_key:
            return self._parts_memo[1]
        q = parse_problem(problem)
        score: dict[str, float] = defaultdict(float)
        why: dict[str, list[str]] = defaultdict(list)

        lexical = self._bm25(q.terms)
        top = max(lexical.values(), default=0.0) or 1.0
        defs: dict[str, float] = defaultdict(float)
        written: dict[str, float] = defaultdict(float)
        named: dict[str, float] = {}
        for path, s in lexical.items():
            score[path] += W_LEXICAL * s / top

        # Definitions of the identifiers the issue names: rare names point at few files.
        for ident, count in q.idents.items():
            files = self.defs.get(ident)
            if not files:
                continue
            idf = math.log(1 + self.n_docs / len(files))
            w = idf * (1 + DEF_REPEAT * math.log(count)) / max(1.0, len(files) ** DEF_SPREAD)
            for path in files:
                defs[path] += W_DEF * w
                why[path].append(ident)

        # Dotted names: a module path or module.attribute.
        for dotted in q.dotted:
            hit = self.module_path(dotted)
            if hit is not None:
                depth = hit.count("/") + 1
                written[hit] += 2.0 + 0.5 * min(depth, 4)

        # Paths written in the issue or its traceback (suffix match: tracebacks hold absolute paths).
        frame_paths = [p for p, _ in q.frames]
        for written_path in q.paths + frame_paths:
            for path in self._match_written_path(written_path):
                bonus = 6.0
                if written_path in frame_paths:
                    # The deepest frames are nearest the fault.
                    bonus = 3.0 + 3.0 * (frame_paths.index(written_path) + 1) / len(frame_paths)
                written[path] += bonus
        for signal in (defs, written):
            for path, s in signal.items():
                score[path] += s

        # The file's own name said in the issue (``autodoc``, ``sessions``).
        for path in list(score):
            parts = _parts(path)
            stem = _stem(parts[-1]) if parts else ""
            if stem == "__init__":
                stem = parts[-2] if len(parts) > 1 else ""
            if stem.lower() in q.terms and stem.lower() not in STOP and len(stem) > 3:
                score[path] += 1.0
                named[path] = 1.0

        today = {p: s for p, s in score.items() if self._rankable(p)}
        fixes: dict[str, float] = {}
        cochanged: dict[str, float] = {}
        if self.history is not None and history:
            fixes = {p: s for p, s in self.history.similar_fixes(q.terms, self._files).items()
                     if self._rankable(p)}
            seeds = sorted(((-s * penalty(p), p) for p, s in today.items()))[:CO_SEEDS]
            if seeds and cochange:
                best = -seeds[0][0] or 1.0
                cochanged = {p: s for p, s in self.history.co_changed(
                    {p: -neg / best for neg, p in seeds}, self._files).items() if self._rankable(p)}
        ok = self._rankable
        parts = RankParts(today, dict(why), fixes, cochanged, self._literal(problem) if literal else {},
                          self._tested(today),
                          lexical={p: s / top for p, s in lexical.items() if ok(p)},
                          defs={p: s for p, s in defs.items() if ok(p)},
                          written={p: s for p, s in written.items() if ok(p)},
                          named=named, title=self._title(problem), prose=self._prose(problem),
                          test_cochange=self._test_cochange(today) if test_cochange else {},
                          executed={p: s for p, s in self.execution.items() if ok(p)})
        if evidence:
            parts.api, parts.handler = self._public_api(q), self._handlers(q)
            parts.hist_api = self._history_of_names(q) if history else {}
        self._parts_memo = (memo_key, parts)
        return parts

    def _literal(self, problem: str) -> dict[str, float]:
        """Files whose string literals the issue quotes verbatim (an error message, a warning,
        an option): each piece found weighs its rarity, log(1 + files / files holding it)."""
        if self._messages is None:
            owners: dict[str, list[str]] = defaultdict(list)
            # Tests assert the messages they provoke; the code that says them is the lead.
            code = [p for p in self.paths if p.endswith(PY_SUFFIXES) and not is_test_path(p)]
            for path in code:
                for piece in self.infos[path].messages:
                    owners[piece].append(path)
            self._messages = (max(1, len(code)), dict(owners))
        n, messages = self._messages
        out: dict[str, float] = defaultdict(float)
        for piece, paths in messages.items():
            if piece in problem:
                idf = math.log(1 + n / len(paths))
                for path in paths:
                    if self._rankable(path):
                        out[path] += idf
        return dict(out)

    def _tested(self, today: dict[str, float]) -> dict[str, float]:
        """The modules under test in the test files that match the issue best.

        An issue describes behaviour the way a test exercises it (the same calls, the same
        options), while the fix sits in the module the test is named after: ``test_pathlib.py``
        for ``pathlib.py``. Each of the TEST_SEEDS best test files hands its score (relative to
        the best one's) to its subjects (``subjects_of_test``), shared among them."""
        tests = sorted((-s, p) for p, s in today.items() if is_test_path(p) and s > 0)[:TEST_SEEDS]
        if not tests:
            return {}
        best = -tests[0][0]
        out: dict[str, float] = defaultdict(float)
        for neg, test in tests:
            subjects = [p for p in self.subjects_of_test(test) if self._rankable(p)]
            for path in subjects:
                out[path] += (-neg / best) / len(subjects)
        return dict(out)

    def _test_cochange(self, today: dict[str, float]) -> dict[str, float]:
        """The code files that changed together with the test files the issue matches best.

        The subjects a test is named after (``_tested``) miss the module a behaviour lives in when
        its tests are organized by feature rather than by module; the commits that fixed that
        behaviour changed the test and the module together. Each of the
        TEST_SEEDS best test files hands its score (relative to the best one's) to the code files
        that changed with it in focused commits before the base (``HistoryView.co_changed``)."""
        if self.history is None:
            return {}
        tests = sorted((-s, p) for p, s in today.items() if is_test_path(p) and s > 0)[:TEST_SEEDS]
        if not tests:
            return {}
        best = -tests[0][0]
        together = self.history.co_changed({p: -neg / best for neg, p in tests}, self._files)
        return {p: s for p, s in together.items()
                if self._rankable(p) and p.endswith(PY_SUFFIXES) and not is_test_path(p)}

    def exports(self) -> dict[str, list[str]]:
        """Public API name -> the code files that define it at module level, as the packages'
        ``__init__.py`` re-export it (``from .dense import Matrix``; a module imported whole, or
        with ``*``, exports its public top-level names). Memoized per index."""
        if self._exports is not None:
            return self._exports
        top_level: dict[str, set[str]] = {}
        def defined(path: str) -> set[str]:
            got = top_level.get(path)
            if got is None:
                got = top_level[path] = {s.name for s in self.infos[path].symbols if s.qualname == s.name}
            return got
        out: dict[str, set[str]] = defaultdict(set)
        for init in self.by_name.get("__init__.py", []):
            if is_test_path(init):
                continue
            for mod in self.infos[init].imports:
                target = self.modules.get(mod)
                if target is not None and not target.endswith("__init__.py"):
                    # A module imported whole or with ``*``: its public names are the package's.
                    for name in defined(target):
                        if not name.startswith("_"):
                            out[name].add(target)
                    continue
                package, _, name = mod.rpartition(".")
                owner = self.modules.get(package)
                if owner is None or name.startswith("_"):
                    continue
                if owner.endswith("__init__.py"):
                    prefix = owner[: -len("__init__.py")]
                    hits = [p for p in self.defs.get(name, ()) if p.startswith(prefix) and not is_test_path(p)
                            and name in defined(p)]
                    out[name].update(hits[:3])
                elif name in defined(owner):
                    out[name].add(owner)
        self._exports = {name: sorted(files) for name, files in out.items()}
        return self._exports

    def _public_api(self, q: Query) -> dict[str, float]:
        """Files defining the public API the issue names (``latex(...)``, ``Matrix``), each name
        weighted by how few files export it: ``Symbol`` says little, ``hstack`` much."""
        exports = self.exports()
        out: dict[str, float] = defaultdict(float)
        for ident in q.idents:
            files = exports.get(ident)
            if not files:
                continue
            idf = math.log(1 + self.n_docs / len(self.defs.get(ident, files)))
            for path in files:
                if self._rankable(path):
                    out[path] += idf / len(files)
        return dict(out)

    def _handlers(self, q: Query) -> dict[str, float]:
        """Files with methods dispatched on a class the issue names (``_print_Product``,
        ``_eval_Mod``, ``visit_Subscript``): printers, visitors and rewriters."""
        if self._handler_map is None:
            found: dict[str, set[str]] = defaultdict(set)
            for path, info in self.infos.items():
                if path.endswith(PY_SUFFIXES) and not is_test_path(path):
                    for sym in info.symbols:
                        suffix = sym.name.rpartition("_")[2]
                        if suffix[:1].isupper() and "." in sym.qualname and "_" in sym.name.strip("_"):
                            found[suffix].add(path)
            self._handler_map = {k: sorted(v) for k, v in found.items()}
        out: dict[str, float] = defaultdict(float)
        for ident in q.idents:
            if ident in self.defs:
                for path in self._handler_map.get(ident, ()):
                    if self._rankable(path):
                        out[path] += 1.0
        return dict(out)

    def _title(self, problem: str) -> dict[str, float]:
        """BM25 of the issue's first line alone: the reporter's one-line summary names the
        feature at fault, while the body's examples, output and environment dilute the words."""
        title = problem.strip().split("\n", 1)[0]
        return {p: s for p, s in self._bm25(Counter(terms_of(title))).items() if self._rankable(p)}

    def _prose(self, problem: str) -> dict[str, float]:
        """BM25 of the issue's words without its code blocks: the reporter's description of the
        behaviour, which pasted output, logs and long examples otherwise outweigh."""
        text = _CODE_BLOCK_RE.sub(" ", problem)
        return {p: s for p, s in self._bm25(Counter(terms_of(text))).items() if self._rankable(p)}

    def _history_of_names(self, q: Query) -> dict[str, float]:
        """The history signal queried with the code the issue names only: past fixes whose
        messages name the same functions and classes."""
        if self.history is None or not q.idents:
            return {}
        terms = Counter(t for ident in q.idents for t in terms_of(ident))
        return {p: s for p, s in self.history.similar_fixes(terms, self._files).items() if self._rankable(p)}

    def subjects_of_test(self, test: str) -> list[str]:
        """The code files a test file is named after (``tests/test_x.py``, ``unittest_x.py``,
        ``x_test.py`` -> ``x.py`` or ``x/__init__.py``), nearest to the test in the tree first
        (only the nearest are kept: ``sympy/core/tests/test_numbers.py`` -> ``sympy/core/numbers.py``,
        not ``sympy/functions/combinatorial/numbers.py``)."""
        parts = _parts(test)
        stem = _stem(parts[-1]) if parts else ""
        for prefix in ("test_", "unittest_", "tests_"):
            if stem.startswith(prefix):
                stem = stem[len(prefix):]
                break
        else:
            if not stem.endswith("_test"):
                return []
            stem = stem[: -len("_test")]
        cands = []
        for name in (stem, stem[:-1] if stem.endswith("s") else ""):
            if len(name) < 2:
                continue
            cands = [p for p in self.by_name.get(f"{name}.py", []) + self._packages.get(name, [])
                     if not is_test_path(p)]
            if cands:
                break
        if not cands:
            return []

        def shared(path: str) -> int:
            n = 0
            for a, b in zip(_parts(path), parts, strict=False):
                if a != b:
                    break
                n += 1
            return n
        near = max(shared(p) for p in cands)
        return sorted(p for p in cands if shared(p) == near)

    def _rankable(self, path: str) -> bool:
        info = self.infos.get(path)
        return info is not None and path in self._files and info.readable

    def _match_written_path(self, written: str) -> list[str]:
        w = written.replace("\\", "/").lstrip("./")
        if w in self._files:
            return [w]
        parts = w.split("/")
        # Longest repository-relative suffix of the written path that names a real file.
        for i in range(1, len(parts)):
            suffix = "/".join(parts[i:])
            if suffix in self._files:
                return [suffix]
        if len(parts) >= 2:
            tail = "/".join(parts[-2:])
            hits = [p for p in self.by_name.get(parts[-1], []) if p.endswith("/" + tail)]
            if hits:
                return hits[:2]
        return []

    # -- the Planner's map -------------------------------------------------------------------

    def repo_map(self, ranked: list[Candidate], max_tokens: int = 6000) -> str:
        """Ranked files with their classes and functions, then the tree folded around them."""
        per_file = 24
        while True:
            text = self._render_map(ranked, per_file)
            if count_tokens(text) <= max_tokens or per_file == 0:
                break
            per_file = per_file // 2 if per_file > 3 else per_file - 1
        if count_tokens(text) > max_tokens:
            text = _cut(text, max_tokens)
        return text

    def _render_map(self, ranked: list[Candidate], per_file: int) -> str:
        lines = ["Candidate files, most likely first (classes and functions they define):"]
        for i, cand in enumerate(ranked, 1):
            info = self.infos[cand.path]
            head = f"{i:>2}. {cand.path} ({info.lines} lines)"
            if per_file:
                names = _symbol_names(info.symbols, cand.symbols, per_file)
                if names:
                    head += ": " + ", ".join(names)
            lines.append(head)
        lines.append("")
        lines.append("Repository tree (folded; [n] = files inside):")
        lines.extend(self._folded_tree({c.path for c in ranked}))
        return "\n".join(lines)

    def _folded_tree(self, keep: set[str]) -> list[str]:
        # Directories on the way to a candidate are opened; others are shown folded, with counts.
        open_dirs = {"."}
        for path in keep:
            parent = PurePosixPath(path).parent
            while str(parent) != ".":
                open_dirs.add(str(parent))
                parent = parent.parent
        counts: Counter[str] = Counter()
        children: dict[str, set[str]] = defaultdict(set)
        for path in self.paths:
            parts = PurePosixPath(path).parts
            for depth in range(len(parts)):
                d = "/".join(parts[:depth]) or "."
                counts[d] += 1
                if d in open_dirs:
                    child = "/".join(parts[:depth + 1])
                    children[d].add(child)
                if d not in open_dirs:
                    break
        out: list[str] = []

        def walk(d: str, indent: int) -> None:
            kids = sorted(children.get(d, ()))
            dirs = [c for c in kids if c not in self.entries]
            files = [c for c in kids if c in self.entries]
            for c in dirs:
                name = PurePosixPath(c).name
                if c in open_dirs:
                    out.append("  " * indent + f"{name}/")
                    walk(c, indent + 1)
                else:
                    out.append("  " * indent + f"{name}/ [{counts[c]}]")
            shown = [f for f in files if f in keep]
            others = len(files) - len(shown)
            for f in shown:
                out.append("  " * indent + PurePosixPath(f).name + "  *")
            if others:
                out.append("  " * indent + f"(+{others} other files)")

        walk(".", 0)
        return out

    # -- the Explorer's view of a file --------------------------------------------------------

    def read_text(self, path: str) -> str | None:
        path = clean_path(path)
        info = self.infos.get(path)
        if info is None or not info.readable or path not in self._files:
            return None
        data = self._read_ahead.pop(path, None)
        if data is None:
            data = self.source.read_many([self.entries[path]]).get(path)
        return None if data is None else _decode(data)

    def read_ahead(self, paths: Iterable[str]) -> None:
        """Read these files in one go (one ``git cat-file`` for a mirror, not one per file); each
        is kept until its next ``read_text``."""
        wanted = [self.entries[p] for p in dict.fromkeys(clean_path(p) for p in paths)
                  if p in self._files and p not in self._read_ahead and self.infos[p].readable]
        if wanted:
            self._read_ahead.update(self.source.read_many(wanted))

    def view(self, path: str, focus: list[str], max_tokens: int, full_under_lines: int = 400) -> str:
        """The file as the Explorer sees it, within ``max_tokens``.

        Small files are shown whole with line numbers. Larger ones as a skeleton: every class and
        function signature with its line range and docstring's first line, module-level
        statements' first lines, and full bodies only for the ``focus`` symbols.
        """
        path = clean_path(path)
        if path not in self.entries:
            return f"# {path}: no such file"
        text = self.read_text(path)
        if text is None:
            e = self.entries[path]
            return f"# {path}: not shown ({'symlink' if e.mode == '120000' else 'binary, huge or unreadable'})"
        lines = text.splitlines()
        header = f"# {path} ({len(lines)} lines)"
        full = header + "\n" + _numbered(lines, 1, len(lines))
        if len(lines) <= full_under_lines and count_tokens(full) <= max_tokens:
            return full
        info = self.infos[path]
        if not info.symbols:
            return self._grep_view(path, lines, focus, max_tokens)
        focus_set = {f.split(".")[-1] for f in focus} | set(focus)
        for level in range(4):
            out = header + " [skeleton: bodies shown only for " + (", ".join(focus) or "nothing") + "]\n"
            out += self._skeleton(lines, info, focus_set, level, max_tokens - count_tokens(out))
            if count_tokens(out) <= max_tokens:
                return out
        return _cut(out, max_tokens)

    def _skeleton(self, lines: list[str], info: FileInfo, focus: set[str], level: int,
                  budget: int) -> str:
        """level 0: signatures, docstrings, focus bodies; 1: no docstrings; 2: classes with no
        focus inside folded to one line listing their methods; 3: focus bodies cut to fit."""
        symbols = sorted(info.symbols, key=lambda s: (s.start, -s.end))
        focused = [s for s in symbols if s.name in focus or s.qualname in focus]
        body_cap = None
        if level >= 3 and focused:
            # What the folded skeleton costs without any body; the rest is shared by the bodies.
            base = count_tokens(self._skeleton(lines, info, set(), 2, budget))
            body_cap = max((budget - base) // len(focused) - 20, 60)
        items: list[tuple[int, str]] = []
        for a, b, is_doc in info.stmts:
            if level >= 2 and len(items) >= 30:
                items.append((a, f"{a:>5}| ... {len(info.stmts) - 30} more module-level statements"))
                break
            last = a if is_doc or b - a > 2 else b
            text = _numbered(lines, a, last)
            items.append((a, text + (f"  ... (to line {b})" if last < b else "")))
        covered = 0
        for s in symbols:
            if s.start <= covered:
                continue
            depth = s.qualname.count(".")
            pad = "       " + "    " * (depth + 1)
            if s in focused and s.kind == "class" and s.end - s.start > BIG_CLASS_LINES:
                # A big class in focus: its own statements (``__slots__``, attributes) in full,
                # its methods as signatures below, unless a method is itself in focus.
                items.append((s.start, _class_outline(lines, s, symbols)))
                continue
            if s in focused:
                body = _numbered(lines, s.start, s.end)
                if body_cap is not None and count_tokens(body) > body_cap:
                    body = _cut(body, body_cap)
                items.append((s.start, body))
                covered = s.end
                continue
            has_focus = any(s.start <= f.start and f.end <= s.end for f in focused)
            if level >= 2 and s.kind == "class" and not has_focus:
                methods = [m.name for m in symbols if m.qualname.startswith(s.qualname + ".")
                           and m.qualname.count(".") == depth + 1]
                text = _numbered(lines, s.start, min(s.header_end, s.start + 3)) + f"  # lines {s.start}-{s.end}"
                if methods:
                    text += "\n" + pad + "methods: " + ", ".join(methods)
                items.append((s.start, text))
                covered = s.end
                continue
            text = _numbered(lines, s.start, min(s.header_end, s.start + 5))
            if s.doc and level == 0:
                text += "\n" + pad + f'"""{s.doc}"""'
            if s.kind == "def":
                text += "\n" + pad + f"... lines {s.start}-{s.end}"
                covered = s.end
            items.append((s.start, text))
        items.sort(key=lambda t: t[0])
        return "\n".join(text for _, text in items)

    def _grep_view(self, path: str, lines: list[str], focus: list[str], max_tokens: int) -> str:
        """A large file with no symbols: its head, then windows around lines naming the focus."""
        header = f"# {path} ({len(lines)} lines) [head, and lines around: {', '.join(focus) or 'nothing'}]\n"
        budget = max_tokens - count_tokens(header)
        picked: set[int] = set(range(1, min(len(lines), 40) + 1))
        for i, line in enumerate(lines, 1):
            if any(f and f in line for f in focus):
                picked.update(range(max(1, i - 5), min(len(lines), i + 5) + 1))
        chunks: list[str] = []
        prev = 0
        for n in sorted(picked):
            if prev and n != prev + 1:
                chunks.append("  ...")
            chunks.append(f"{n:>5}| {lines[n - 1]}")
            prev = n
        return header + _cut("\n".join(chunks), budget)

    # -- what to read next --------------------------------------------------------------------

    def options(self, read: list[str], suspects: list[str]) -> list[Option]:
        """What the Explorer may read next, each with the reason it is offered."""
        read_set = {clean_path(p) for p in read}
        out: dict[str, Option] = {}

        def offer(path: str, why: str) -> None:
            if path in read_set or path in out or path not in self._files:
                return
            if not self.infos[path].readable:
                return
            out[path] = Option(path, why)

        for path in read:
            for imp in self.imports_of(clean_path(path)):
                offer(imp, f"imported by {path}")
        for path in read:
            for test in self.tests_of(clean_path(path)):
                offer(test, f"tests of {path}")
        for name in suspects:
            sym = name.split(".")[-1]
            for path in self.callers_of(sym):
                offer(path, f"calls {sym}")
        dirs = {str(PurePosixPath(clean_path(p)).parent) for p in read}
        for cfg in CONFIG_NAMES:
            for d in sorted(dirs) + ["."]:
                cand = cfg if d == "." else f"{d}/{cfg}"
                offer(cand, "config")
        return list(out.values())

    def tests_of(self, path: str) -> list[str]:
        stem = PurePosixPath(path).stem
        if stem == "__init__":
            stem = PurePosixPath(path).parent.name
        names = (f"test_{stem}.py", f"{stem}_test.py", f"test_{stem}s.py")
        hits = [p for name in names for p in self.by_name.get(name, [])]
        pkg = PurePosixPath(path).parts[0] if "/" in path else ""
        # Prefer tests in the same package tree.
        hits.sort(key=lambda p: (not p.startswith(pkg), p))
        return hits[:3]

    def callers_of(self, name: str, n: int = 4) -> list[str]:
        """Files that use ``name`` but do not define it, most uses first."""
        posting = self.posting(name.lower())
        defining = set(self.defs.get(name, []))
        users = [(tf, p) for p, tf in posting if p not in defining]
        users.sort(key=lambda t: (is_test_path(t[1]), -t[0], t[1]))
        return [p for _, p in users[:n]]


# ---- helpers -------------------------------------------------------------------------------

def clean_path(path: str) -> str:
    p = path.strip().replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p.lstrip("/")


def _numbered(lines: list[str], start: int, end: int) -> str:
    return "\n".join(f"{n:>5}| {lines[n - 1]}" for n in range(start, min(end, len(lines)) + 1))


def _cut(text: str, max_tokens: int) -> str:
    if count_tokens(text) <= max_tokens:
        return text
    keep = max(0, max_tokens * 7 // 2 - 60)
    cut = text[:keep]
    if "\n" in cut:
        cut = cut[: cut.rindex("\n")]
    return cut + "\n  ... (cut to fit the token budget)"


def _symbol_names(symbols: list[Symbol], matched: Iterable[str], limit: int) -> list[str]:
    matched = list(matched)
    top = [s for s in symbols if s.qualname.count(".") == 0]
    names = [s.name + ("()" if s.kind == "def" else "") for s in top]
    # Methods the issue names are shown qualified, first.
    hits = [s.qualname for s in symbols if s.name in matched and "." in s.qualname]
    ordered = list(dict.fromkeys(hits + [n for n in names if n.rstrip("()") in matched] + names))
    if len(ordered) > limit:
        ordered = ordered[:limit] + [f"+{len(ordered) - limit} more"]
    return ordered


def token_reader(index: RepoIndex) -> Callable[[str], int]:
    """Tokens of a file's full text, for budgeting."""
    def count(path: str) -> int:
        text = index.read_text(path)
        return count_tokens(text) if text else 0
    return count


def views_within(index: RepoIndex, paths: list[str], focus: list[str], token_budget: int,
                 full_under_lines: int = 400) -> list[tuple[str, str]]:
    """Views of ``paths`` whose sizes add up to at most ``token_budget``.

    Each file gets an equal share; what small files leave unused is handed on to the larger ones,
    so a short module costs only its size and a big one gets the skeleton room it needs.
    """
    if not paths:
        return []
    views: dict[str, str] = {}
    left = token_budget
    pending = list(paths)
    index.read_ahead(pending)
    # Cheapest first: full small files settle, then the rest share what remains.
    sized = sorted(pending, key=lambda p: (index.infos[clean_path(p)].size if clean_path(p) in index.infos else 0, p))
    for i, path in enumerate(sized):
        share = left // (len(sized) - i)
        view = index.view(path, focus, max(share, 1), full_under_lines)
        views[path] = view
        left -= count_tokens(view)
    return [(p, views[p]) for p in paths]


def _class_outline(lines: list[str], cls: Symbol, symbols: list[Symbol]) -> str:
    """A class's header, its docstring's first line and its own statements, numbered."""
    inside: set[int] = set()
    for child in symbols:
        if child.qualname.startswith(cls.qualname + "."):
            inside.update(range(child.start, child.end + 1))
    keep = list(range(cls.start, cls.header_end + 1))
    n = cls.header_end + 1
    first = lines[n - 1].strip() if n - 1 < len(lines) else ""
    for quote in ('"""', "'''"):
        if first.lstrip("rRuU").startswith(quote):
            keep.append(n)
            if first.count(quote) < 2:
                n += 1
                while n <= cls.end and quote not in lines[n - 1]:
                    n += 1
            n += 1
            break
    keep += [m for m in range(n, cls.end + 1) if m not in inside and lines[m - 1].strip()]
    return "\n".join(f"{m:>5}| {lines[m - 1]}" for m in keep[:60] if m - 1 < len(lines))
