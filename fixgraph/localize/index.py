"""The repository index: ``RepoIndex``, built once per (repository, commit) and cached on disk,
and its ranking of a repository's files for an issue.

Per-file analysis (fixgraph/localize/files.py) is cached by git blob id, so two commits of the same
repository share almost all of it (fixgraph/localize/sources.py). Everything here is deterministic:
the same issue on the same commit gives the same ranking, map and views, which keeps the Planner's
prompt reproducible and testable.

Files that are symlinks, binary, over 1 MB or not text are listed (so ``exists`` and ``nearest``
know them) but never read; a symlink is never followed, wherever it points.

The ranking's formula and its shipped weights are below; ``RepoIndex.rank`` reads the weights from
this module (patch them here), ``fixgraph.localize.query.combine`` applies them.
"""

from __future__ import annotations

import difflib
import json
import math
import subprocess
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np

from fixgraph import phases
from fixgraph.localize.files import (
    PY_SUFFIXES,
    FileInfo,
    _info_from_json,
    _info_to_json,
    _module_of,
    _parts,
    _stem,
    analyze,
)
from fixgraph.localize.query import (
    _CODE_BLOCK_RE,
    Candidate,
    Query,
    RankParts,
    combine,
    is_test_path,
    parse_problem,
    penalty,
)
from fixgraph.localize.sources import (
    Entry,
    Postings,
    _BlobCache,
    _gc_paused,
    _GitSource,
    _read_snapshot,
    _Source,
    _WorktreeSource,
    _write_snapshot,
)
from fixgraph.localize.terms import STOP, terms_of
from fixgraph.localize.views import RepoViews, clean_path
from fixgraph.records import atomic_write, file_lock
from fixgraph.repo.workspace import Worktree, content_key

if TYPE_CHECKING:
    from fixgraph.localize.history import HistoryView

# The ranking, one formula (README, "Localization"):
#
#   score(f) = penalty(f) * (today(f) + max today * (W_HISTORY * H(f) / max H
#                                                    + W_COCHANGE * C(f) / max C + W_LITERAL * L(f) / max L
#                                                    + W_TESTS * T(f) / max T + W_TITLE * Ti(f) / max Ti
#                                                    + W_PROSE * P(f) / max P
#                                                    + W_TEST_COCHANGE * TC(f) / max TC
#                                                    + W_EXECUTED * E(f) / max E))
#
# then the LITERAL_TOP best files (fixgraph/localize/query.py) are put in order again with
# W_LITERAL_TOP * L(f) / max L (scaled and penalized the same way) added to their scores: the quoted
# literals reorder the files the formula already chose, they never bring one in from below.
#
# (each added signal normalized to its best file and scaled to today's best score, so that its
# weight means the same on every issue). A learned re-ranking of the top 8 (fixgraph/localize/rerank.py)
# can follow; it is off (``rerank.COEF`` empty): cross-validated it was not a stable gain.
# today(f): W_LEXICAL x BM25 over file contents (normalized to the best file) + W_DEF per name the
#   issue uses that f defines + bonuses for dotted names, paths and traceback frames written in the
#   issue, and for f's own name said in it.
# H(f): files touched by past commits (ancestors of the base only) whose messages resemble the
#   issue, each commit weighted by its match, recency and focus (fixgraph/localize/history.py).
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
#   the sandboxed test environment (scoring/runtime/issue_run.py), called f's functions first in a later
#   statement than its setup: how late, from 0 (the first traced statement) to 1 (the last). The
#   setup (building the objects) runs the core every snippet runs; the call the issue is about
#   reaches the code it is about. Absent when the issue has no runnable code or no env (then the
#   ranking is the text's alone, and the record says why).
# Ti(f): BM25 of the title (its first line) alone.
# P(f): BM25 of the issue without its code blocks (the description, not the pasted output).
# penalty(f): 0.2 for tests, 0.4 for docs and non-Python files, else 1.
# The weights come from eval.localization_bench's grid, cross-validated by leaving one repository
# out; the weights that ship as 0 stay searchable there. What the search found:
# docs/benchmarks/localization.md, "What the weight search found".
W_LEXICAL = 16.0  # BM25 over file contents, normalized to the best file's score
W_DEF = 1.5  # a file defines a name the issue uses
DEF_REPEAT = 0.3  # how much repeating a name in the issue adds (log-damped)
DEF_SPREAD = 0.5  # names defined in many files count less: weight / files ** DEF_SPREAD
W_HISTORY = 0.0
W_COCHANGE = 0.0
W_LITERAL = 0.0
W_TESTS = 0.0  # the test co-change below does its work better
W_TITLE = 0.8
W_PROSE = 0.2
W_TEST_COCHANGE = 0.5
# The quoted literals as the ranking's last step: they reorder the LITERAL_TOP files (the Explorer's
# first reads, what recall@8 counts), so they can decide which of them is first but not which are in.
W_LITERAL_TOP = 1.0
# Execution evidence: chosen by the benchmark's grid with the others.
W_EXECUTED = 1.0
CO_SEEDS = 5
TEST_SEEDS = 5  # the test files whose subjects get the tests-to-source signal
INDEX_VERSION = 5


class LocalizeError(Exception):
    """The repository cannot be indexed at this commit; one line for the user."""


class RepoIndex(RepoViews):
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
    @phases.timed("localization: index")
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
        """Use the repository's history before ``base`` in the ranking (see ``fixgraph.localize.history``)."""
        from fixgraph.localize.history import HistoryError, history_status

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

    @phases.timed("localization: ranking")
    def rank(self, problem: str, k: int = 30) -> list[Candidate]:
        """Files most likely to need changing for ``problem``, best first (deterministic)."""
        from fixgraph.localize import rerank

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
