"""What an issue names (``parse_problem``) and how the ranking's signals for it are combined
into one ranking (``combine``): the formula itself, its weights and the signals are described in
the header of ``fixgraph.localize.index``, whose ``RepoIndex.rank`` computes the signals and
passes the shipped weights here.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from fixgraph.localize.files import PY_SUFFIXES, _parts
from fixgraph.localize.terms import _WORD, STOP, terms_of

# The quoted literals reorder this many of the best files (``literal_first``): the Explorer's first
# reads, what recall@8 counts.
LITERAL_TOP = 8


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


# ---- the ranking's signals and how they combine ------------------------------------------------

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


@dataclass
class RankParts:
    """The ranking's signals for one issue, before they are combined (see ``combine``)."""

    today: dict[str, float]
    why: dict[str, list[str]]
    history: dict[str, float]
    cochange: dict[str, float]
    literal: dict[str, float] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)
    # ``today`` taken apart, and the evidence only the learned re-ranking reads (fixgraph/localize/rerank.py).
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
    from the statement index of its first call (``first``, as ``scoring.runtime.issue_run`` records it):
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
    """The one ranking formula (the header of fixgraph/localize/index.py): every signal weighted,
    then the penalty, then the quoted literals reorder the top ``LITERAL_TOP`` (``literal_first``).
    With ``k`` only the ``max(k, LITERAL_TOP)`` best are returned (the same files, in the same order,
    as a full ranking cut there: the benchmark's weight grid asks for thousands of rankings)."""
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
    in from far below costs more than it brings."""
    best = max(parts.literal.values(), default=0.0)
    if not weight or best <= 0:
        return ranked
    scale = max(parts.today.values(), default=0.0) or 1.0
    head = [Candidate(c.path, round(c.score + scale * weight * parts.literal.get(c.path, 0.0) / best
                                    * penalty(c.path), 6), c.symbols)
            for c in ranked[:LITERAL_TOP]]
    head.sort(key=lambda c: (-c.score, c.path))
    return head + ranked[LITERAL_TOP:]

