"""Per-file analysis: what the index knows of one file (its classes and functions, imports,
module-level statements, message-like string literals, term counts), and the token estimate every
prompt budget uses.

An analysis depends on the file's bytes and path only, so it is cached by git blob id
(``sources._BlobCache``). Tokenizing identifiers and prose lives in fixgraph/localize/terms.py, shared with
the history index.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from fixgraph.localize.terms import terms_of

MAX_FILE_BYTES = 1_000_000
PY_SUFFIXES = (".py", ".pyi")
# Text files worth indexing besides Python: docs, configs, templates a fix may touch.
TEXT_SUFFIXES = (".py", ".pyi", ".rst", ".txt", ".md", ".cfg", ".toml", ".ini", ".yaml", ".yml",
                 ".json", ".html", ".css", ".js", ".jinja", ".j2", ".c", ".h", ".pyx", ".pxd",
                 ".sh", ".in", ".conf", ".tex")


# ---- token counting -----------------------------------------------------------------------

def count_tokens(text: str) -> int:
    """A cheap deterministic estimate of a prompt's size in tokens.

    tiktoken needs its encoding files fetched at run time, which offline machines cannot do, so
    every budget in fixgraph uses this one estimate instead. Characters / 3.5 is slightly above
    cl100k's count for Python source (about 3.6-4 characters a token), so budgets err on the safe side.
    """
    return (len(text) * 2 + 6) // 7


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
