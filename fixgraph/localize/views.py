"""What the LLM is shown of a repository: the Planner's map (the ranked files with their classes and
functions, then the tree folded around them), the Explorer's views of files (whole when small, a
skeleton with the focus symbols' bodies when large, all within a token budget) and the files it
may read next.

``RepoViews`` is mixed into ``RepoIndex`` (fixgraph/localize/index.py); it reads the index's
attributes and methods declared below and builds nothing itself. index.py imports this module,
never the other way round, so the functions at the end take their ``RepoIndex`` typed as
``RepoViews``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from fixgraph.localize.files import FileInfo, Symbol, _decode, count_tokens
from fixgraph.localize.query import Candidate, Option, is_test_path
from fixgraph.localize.sources import Entry, _Source

# A class in focus longer than this is outlined (own statements, method signatures), not shown whole.
BIG_CLASS_LINES = 80
CONFIG_NAMES = ("setup.cfg", "pyproject.toml", "setup.py", "tox.ini", "pytest.ini", "conftest.py",
                ".coveragerc", "MANIFEST.in")


class RepoViews:
    """The viewing half of ``RepoIndex``: the map, the views of files and the options."""

    # Set by ``RepoIndex.__init__`` and ``RepoIndex._prepare``.
    source: _Source
    entries: dict[str, Entry]
    infos: dict[str, FileInfo]
    paths: list[str]
    by_name: dict[str, list[str]]
    defs: dict[str, list[str]]
    _files: set[str]
    _read_ahead: dict[str, bytes]

    if TYPE_CHECKING:
        # Defined by ``RepoIndex``.
        def posting(self, term: str) -> list[tuple[str, int]]: ...

        def imports_of(self, path: str) -> list[str]: ...

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


def token_reader(index: RepoViews) -> Callable[[str], int]:
    """Tokens of a file's full text, for budgeting."""
    def count(path: str) -> int:
        text = index.read_text(path)
        return count_tokens(text) if text else 0
    return count


def views_within(index: RepoViews, paths: list[str], focus: list[str], token_budget: int,
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
