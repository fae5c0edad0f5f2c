"""A repository's history as a localization signal: what past commits said, and what they touched.

``HistoryIndex`` reads every commit reachable from the branches and tags of a repository once
(``git log --name-status -M``, merges diffed against their first parent so a merged pull request's
title comes with all the files it changed) and caches it in SQLite under ``<cache_dir>/history/``.
A query is made through ``HistoryIndex.at(base)``, which keeps only the ancestors of the base
commit (``git rev-list``): a fix made after the issue was filed can never reach its ranking, not
even through the BM25 statistics, which are computed over the ancestors alone.

Two signals come out of a ``HistoryView``:

- ``similar_fixes``: files touched by past commits whose messages resemble the issue (BM25 over
  messages), each commit weighted by its relative score, by recency (half-life ``HALF_LIFE_YEARS``)
  and by focus (``1 / log2(1 + files touched)``; commits touching more than ``MAX_COMMIT_FILES``
  files are left out: a 200-file reformatting says nothing about any one file).
- ``co_changed``: files that changed together with given seed files in focused commits.

A shallow mirror or a base with (almost) no ancestors gives no view; the caller ranks as before and
says so. Messages that are not UTF-8 are read with replacement characters.
"""

from __future__ import annotations

import io
import json
import math
import os
import sqlite3
import subprocess
import threading
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fixgraph.localize.terms import terms_of
from fixgraph.records import file_lock
from fixgraph.repo.workspace import content_key

HISTORY_VERSION = 1
# Changelog-sized messages are cut: their tail lists everything and points at nothing.
MAX_MESSAGE_CHARS = 2000
# Fewer ancestors than this and there is no history to learn from.
MIN_COMMITS = 2
# Per-commit weighting of ``similar_fixes`` (see the module docstring).
HALF_LIFE_YEARS = 4.0
MAX_COMMIT_FILES = 100
TOP_COMMITS = 40  # only the best-matching commits vote: the long tail of weak matches is noise
# Co-change counts only commits this focused: a commit touching 30 files ties 435 pairs together.
CO_MAX_FILES = 20
VIEWS_KEPT = 8  # views of recent base commits kept per index (HistoryIndex.at)
_LOG_FORMAT = "%x00%x01%H%x00%P%x00%at%x00%B%x00"
_SECONDS_PER_YEAR = 365.25 * 24 * 3600
# Lines of a message that say who, not what.
_TRAILERS = ("signed-off-by:", "co-authored-by:", "reviewed-by:", "acked-by:", "cc:")


class HistoryError(Exception):
    """The history cannot be read for this base commit; one line for the user."""


@dataclass
class Commit:
    sha: str
    parents: int
    time: int
    message: str
    files: list[str]
    renames: list[tuple[str, str]]  # (old path, new path)


def _git(git_dir: Path, *args: str, data: bytes | None = None, check: bool = True) -> bytes:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], input=data, capture_output=True,
                          check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise HistoryError(f"git {args[0]} failed in {git_dir}: {err[-1] if err else proc.returncode}")
    return proc.stdout


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def parse_log(raw: bytes) -> list[Commit]:
    """Commits from ``git log -z --name-status`` with ``_LOG_FORMAT``, newest first."""
    out: list[Commit] = []
    for rec in raw.split(b"\x00\x01")[1:]:
        parts = rec.split(b"\x00", 4)
        if len(parts) < 5:
            continue
        sha, parents, when, body, rest = parts
        tokens = [t for t in rest.lstrip(b"\x00\n").split(b"\x00")]
        files: list[str] = []
        renames: list[tuple[str, str]] = []
        i = 0
        while i < len(tokens):
            status = tokens[i].strip(b"\n")
            if not status:
                i += 1
                continue
            if status[:1] in (b"R", b"C") and i + 2 < len(tokens):
                old, new = _text(tokens[i + 1]), _text(tokens[i + 2])
                files.append(new)
                if status[:1] == b"R":
                    renames.append((old, new))
                i += 3
            elif i + 1 < len(tokens):
                files.append(_text(tokens[i + 1]))
                i += 2
            else:
                break
        out.append(Commit(_text(sha).strip(), len(parents.split()), int(when or 0),
                          _clean_message(_text(body)), list(dict.fromkeys(files)), renames))
    return out


def _clean_message(message: str) -> str:
    lines = [ln for ln in message.splitlines() if not ln.strip().lower().startswith(_TRAILERS)]
    return "\n".join(lines)[:MAX_MESSAGE_CHARS]


def _log(git_dir: Path, revs: list[str]) -> list[Commit]:
    # --stdin: a repository can have thousands of refs, more than a command line holds.
    data = "".join(r + "\n" for r in revs).encode()
    # Finding a rename by similarity reads both blobs; a mirror missing some (large files left
    # out) makes git fail, so fall back on exact renames (object ids only), then on none.
    for renames in ("-M", "-M100%", "--no-renames"):
        try:
            raw = _git(git_dir, "log", renames, "--name-status", "-z", "--diff-merges=first-parent",
                       f"--format={_LOG_FORMAT}", "--stdin", data=data)
        except HistoryError:
            if renames == "--no-renames":
                raise
            continue
        return parse_log(raw)
    return []


def _tips(git_dir: Path) -> list[str]:
    out = _text(_git(git_dir, "for-each-ref", "--format=%(objectname)^{commit}", "refs/heads", "refs/tags"))
    revs = [line for line in out.split() if line]
    if not revs:
        revs = ["HEAD"]
    # Annotated tags point at tag objects; ^{commit} peels them (and drops tags of trees or blobs).
    peeled = _text(_git(git_dir, "rev-parse", *revs, check=False)).split()
    return sorted(set(p for p in peeled if len(p) == 40))


# ---- the cached arrays -------------------------------------------------------------------

def _pack(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return zlib.compress(buf.getvalue(), 1)


def _unpack(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(zlib.decompress(data)), allow_pickle=False)


def _csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    flat = np.fromiter((x for r in rows for x in r), dtype=np.int32, count=int(ptr[-1]))
    return ptr, flat


class HistoryIndex:
    """Every commit of a repository's branches and tags, as arrays ready for queries."""

    def __init__(self, git_dir: Path, db_path: Path):
        self.git_dir = git_dir
        self.db_path = db_path
        self._views: dict[tuple[str, int], HistoryView | None] = {}
        self._load()

    # -- building and loading -----------------------------------------------------------------

    @classmethod
    def open(cls, git_dir: Path, cache_dir: Path) -> HistoryIndex:
        """The history of ``git_dir``, from the cache when built before (built once, then reused)."""
        git_dir = Path(git_dir).resolve()
        key = content_key(str(HISTORY_VERSION), str(git_dir))
        db_path = cache_dir / "history" / f"{key}.sqlite"
        with _OPEN_LOCK:
            cached = _OPEN.get(db_path)
            if cached is not None and cached[0] == _mtime(db_path):
                return cached[1]
        if not db_path.is_file():
            with file_lock(db_path.with_suffix(".lock")):
                if not db_path.is_file():
                    started = time.perf_counter()
                    tips = _tips(git_dir)
                    _build(git_dir, db_path, _log(git_dir, tips), tips, started)
        index = cls(git_dir, db_path)
        with _OPEN_LOCK:
            _OPEN[db_path] = (_mtime(db_path), index)
        return index

    def _load(self) -> None:
        db = sqlite3.connect(str(self.db_path), timeout=60)
        try:
            arrays = {name: data for name, data in db.execute("SELECT name, data FROM arrays")}
            meta = dict(db.execute("SELECT key, value FROM meta"))
        finally:
            db.close()
        self.shas: list[str] = json.loads(zlib.decompress(arrays["shas"]))
        self.paths: list[str] = json.loads(zlib.decompress(arrays["paths"]))
        vocab: list[str] = json.loads(zlib.decompress(arrays["vocab"]))
        self.term_id = {t: i for i, t in enumerate(vocab)}
        self.sha_idx = {s: i for i, s in enumerate(self.shas)}
        self.path_id = {p: i for i, p in enumerate(self.paths)}
        self.times = _unpack(arrays["times"])
        self.nfiles = _unpack(arrays["nfiles"])
        self.doc_len = _unpack(arrays["doc_len"]).astype(np.float64)
        self.term_ptr, self.term_doc = _unpack(arrays["term_ptr"]), _unpack(arrays["term_doc"])
        self.term_tf = _unpack(arrays["term_tf"]).astype(np.float64)
        self.file_ptr, self.file_ids = _unpack(arrays["file_ptr"]), _unpack(arrays["file_ids"])
        self.path_ptr, self.path_docs = _unpack(arrays["path_ptr"]), _unpack(arrays["path_docs"])
        self.renames = _unpack(arrays["renames"])  # rows: commit, old path id, new path id
        self.tips: list[str] = json.loads(meta["tips"])
        self.build_seconds = float(meta.get("build_seconds", "0"))
        self.size_bytes = self.db_path.stat().st_size

    def _extend(self, base: str) -> None:
        """Add the commits of ``base`` that were not reachable from the tips indexed so far."""
        with file_lock(self.db_path.with_suffix(".lock")):
            started = time.perf_counter()
            fresh = _log(self.git_dir, [base] + [f"^{t}" for t in self.tips])
            if fresh:
                _build(self.git_dir, self.db_path, fresh, self.tips + [base], started, existing=self.db_path)
        self._load()
        with _OPEN_LOCK:
            _OPEN[self.db_path] = (_mtime(self.db_path), self)

    # -- queries --------------------------------------------------------------------------------

    def at(self, base: str) -> HistoryView | None:
        """The history before ``base`` (inclusive), or None when there is none to learn from.

        Raises ``HistoryError`` when the base commit is not in the repository.
        """
        # One git process, not three: under a loaded machine each start costs tens of milliseconds.
        found = _git(self.git_dir, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False)
        sha = _text(found).strip()
        if len(sha) != 40:
            raise HistoryError(f"base commit {base} is not in {self.git_dir}")
        if _is_shallow(self.git_dir):
            return None
        key = (sha, len(self.shas))
        with _OPEN_LOCK:
            if key in self._views:
                return self._views[key]
        mask = self._ancestry(sha)
        view = None if int(mask.sum()) < MIN_COMMITS else HistoryView(self, mask, int(self.times[self.sha_idx[sha]]))
        with _OPEN_LOCK:
            # The Planner, each Explorer step and every task on one commit ask for the same view;
            # its rename maps cost a good part of a second on sympy. A few commits are kept.
            if len(self._views) >= VIEWS_KEPT:
                self._views.pop(next(iter(self._views)))
            self._views[key] = view
        return view

    def _ancestry(self, sha: str) -> np.ndarray:
        """Which indexed commits are ancestors of ``sha`` (itself included); cached per commit,
        since ``git rev-list`` of a large repository costs a good part of a second."""
        if sha not in self.sha_idx:
            self._extend(sha)
        # Commit indexes change when the index is extended; the count names the numbering.
        path = self.db_path.with_suffix(".ancestry") / f"{sha}-{len(self.shas)}.npy"
        try:
            return np.unpackbits(np.load(path, allow_pickle=False))[: len(self.shas)].astype(bool)
        except (OSError, ValueError):
            pass
        revs = _text(_git(self.git_dir, "rev-list", sha)).split()
        idx = np.fromiter((self.sha_idx.get(s, -1) for s in revs), dtype=np.int64, count=len(revs))
        mask = np.zeros(len(self.shas), dtype=bool)
        mask[idx[idx >= 0]] = True
        path.parent.mkdir(parents=True, exist_ok=True)
        # Threads of one process write here too: the name must be unique per writer, not per process.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, np.packbits(mask), allow_pickle=False)
        os.replace(tmp, path)
        return mask


def history_status(git_dir: Path, base: str, cache_dir: Path) -> tuple[HistoryView | None, str]:
    """The view at ``base`` and one line saying whether history is used, and why not."""
    if _is_shallow(Path(git_dir)):
        # Checked first: a shallow clone's few commits would index fine but teach nothing.
        return None, "history: absent (shallow mirror); ranked without it"
    view = HistoryIndex.open(Path(git_dir), cache_dir).at(base)
    if view is None:
        return None, "history: absent (no commits before the base); ranked without it"
    return view, f"history: {view.n_commits} commits before the base"


_OPEN: dict[Path, tuple[float, HistoryIndex]] = {}
_OPEN_LOCK = threading.Lock()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0


def _is_shallow(git_dir: Path) -> bool:
    # What ``git rev-parse --is-shallow-repository`` reads, without starting git for it.
    return (git_dir / "shallow").is_file()


def _build(git_dir: Path, db_path: Path, commits: list[Commit], tips: list[str], started: float,
           existing: Path | None = None) -> None:
    """Write the index (``existing`` rows plus ``commits``) to ``db_path`` atomically."""
    rows: list[Commit] = []
    if existing is not None and existing.is_file():
        rows = _read_commits(existing)
    seen = {c.sha for c in rows}
    rows = [c for c in commits if c.sha not in seen] + rows
    paths: dict[str, int] = {}
    vocab: dict[str, int] = {}
    term_rows: list[list[int]] = []
    tf_rows: list[list[int]] = []
    file_rows: list[list[int]] = []
    renames: list[tuple[int, int, int]] = []
    doc_len: list[int] = []
    for i, c in enumerate(rows):
        counts = Counter(terms_of(c.message))
        term_rows.append([vocab.setdefault(t, len(vocab)) for t in counts])
        tf_rows.append(list(counts.values()))
        doc_len.append(sum(counts.values()))
        file_rows.append([paths.setdefault(p, len(paths)) for p in c.files])
        for old, new in c.renames:
            renames.append((i, paths.setdefault(old, len(paths)), paths.setdefault(new, len(paths))))
    # Inverted: term -> commits (with counts), path -> commits.
    by_term: list[list[int]] = [[] for _ in vocab]
    tf_by_term: list[list[int]] = [[] for _ in vocab]
    for i, (terms, tfs) in enumerate(zip(term_rows, tf_rows, strict=True)):
        for t, tf in zip(terms, tfs, strict=True):
            by_term[t].append(i)
            tf_by_term[t].append(tf)
    by_path: list[list[int]] = [[] for _ in paths]
    for i, files in enumerate(file_rows):
        for f in files:
            by_path[f].append(i)
    term_ptr, term_doc = _csr(by_term)
    _, term_tf = _csr(tf_by_term)
    file_ptr, file_ids = _csr(file_rows)
    path_ptr, path_docs = _csr(by_path)

    def js(obj: object) -> bytes:
        return zlib.compress(json.dumps(obj).encode(), 1)

    arrays = {
        "shas": js([c.sha for c in rows]), "paths": js(list(paths)), "vocab": js(list(vocab)),
        "times": _pack(np.array([c.time for c in rows], dtype=np.int64)),
        "nfiles": _pack(np.array([len(c.files) for c in rows], dtype=np.int32)),
        "doc_len": _pack(np.array(doc_len, dtype=np.int32)),
        "term_ptr": _pack(term_ptr), "term_doc": _pack(term_doc), "term_tf": _pack(term_tf.astype(np.int16)),
        "file_ptr": _pack(file_ptr), "file_ids": _pack(file_ids),
        "path_ptr": _pack(path_ptr), "path_docs": _pack(path_docs),
        "renames": _pack(np.array(renames, dtype=np.int32).reshape(-1, 3)),
    }
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(f".{db_path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(str(tmp))
    try:
        with db:
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute("CREATE TABLE commits (idx INTEGER PRIMARY KEY, sha TEXT, parents INTEGER, "
                       "time INTEGER, message TEXT, files TEXT, renames TEXT)")
            db.execute("CREATE TABLE arrays (name TEXT PRIMARY KEY, data BLOB)")
            db.executemany("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(i, c.sha, c.parents, c.time, c.message, json.dumps(c.files), json.dumps(c.renames))
                            for i, c in enumerate(rows)])
            db.executemany("INSERT INTO arrays VALUES (?, ?)", list(arrays.items()))
            db.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("version", str(HISTORY_VERSION)), ("git_dir", str(git_dir)), ("tips", json.dumps(sorted(set(tips)))),
                ("build_seconds", f"{time.perf_counter() - started:.2f}"), ("commits", str(len(rows)))])
    finally:
        db.close()
    os.replace(tmp, db_path)


def _read_commits(db_path: Path) -> list[Commit]:
    db = sqlite3.connect(str(db_path), timeout=60)
    try:
        return [Commit(sha, parents, t, msg, json.loads(files), [tuple(r) for r in json.loads(ren)])
                for sha, parents, t, msg, files, ren in
                db.execute("SELECT sha, parents, time, message, files, renames FROM commits ORDER BY idx")]
    finally:
        db.close()


class HistoryView:
    """The history as it stood at one base commit: its ancestors only."""

    def __init__(self, index: HistoryIndex, mask: np.ndarray, base_time: int):
        self.index = index
        self.mask = mask
        self.base_time = base_time
        self.n_commits = int(mask.sum())
        self.avg_len = float(index.doc_len[mask].mean()) if self.n_commits else 1.0
        self._forward: dict[str, str] | None = None
        self._backward: dict[str, list[str]] | None = None

    # -- renames --------------------------------------------------------------------------------

    def _rename_maps(self) -> tuple[dict[str, str], dict[str, list[str]]]:
        if self._forward is None or self._backward is None:
            ix = self.index
            forward: dict[str, str] = {}
            backward: dict[str, list[str]] = defaultdict(list)
            # Oldest first, so when a name was reused the latest rename of it wins.
            for commit, old, new in ix.renames[::-1].tolist():
                if self.mask[commit]:
                    forward[ix.paths[old]] = ix.paths[new]
                    backward[ix.paths[new]].append(ix.paths[old])
            self._forward, self._backward = forward, dict(backward)
        return self._forward, self._backward

    def resolve(self, path: str, existing: set[str] | dict[str, object]) -> str | None:
        """The name a path touched in the past has at the base commit (renames followed)."""
        forward, _ = self._rename_maps()
        seen: set[str] = set()
        while path not in existing and path in forward and path not in seen:
            seen.add(path)
            path = forward[path]
        return path if path in existing else None

    def names_of(self, path: str) -> list[str]:
        """``path`` and every earlier name it had."""
        _, backward = self._rename_maps()
        out = [path]
        for p in out:
            if len(out) > 20:
                break
            out.extend(o for o in backward.get(p, ()) if o not in out)
        return out

    # -- signals --------------------------------------------------------------------------------

    def commit_scores(self, terms: Counter[str]) -> dict[int, float]:
        """BM25 of each ancestor commit's message against ``terms`` (positive scores only)."""
        scores = self._scores(terms)
        return {int(i): float(scores[i]) for i in np.nonzero(scores)[0]}

    def _scores(self, terms: Counter[str]) -> np.ndarray:
        ix = self.index
        k1, b = 1.2, 0.75
        scores = np.zeros(len(ix.shas))
        n = self.n_commits
        for term, qtf in terms.items():
            t = ix.term_id.get(term)
            if t is None:
                continue
            lo, hi = ix.term_ptr[t], ix.term_ptr[t + 1]
            docs = ix.term_doc[lo:hi]
            keep = self.mask[docs]
            docs = docs[keep]
            df = len(docs)
            if not df:
                continue
            tf = ix.term_tf[lo:hi][keep]
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            norm = tf + k1 * (1 - b + b * ix.doc_len[docs] / self.avg_len)
            np.add.at(scores, docs, idf * min(qtf, 3) * tf * (k1 + 1) / norm)
        return scores

    def similar_fixes(self, terms: Counter[str], existing: set[str] | dict[str, object],
                      top: int = TOP_COMMITS, half_life: float = HALF_LIFE_YEARS,
                      max_files: int = MAX_COMMIT_FILES) -> dict[str, float]:
        """Files at the base touched by the past commits whose messages best match ``terms``."""
        ix = self.index
        scores = self._scores(terms)
        scores[(ix.nfiles == 0) | (ix.nfiles > max_files)] = 0.0
        hits = np.nonzero(scores)[0]
        # Best first; ties by index (log order), so the ranking is deterministic.
        hits = hits[np.lexsort((hits, -scores[hits]))][:top]
        eligible = [(float(scores[i]), int(i)) for i in hits]
        if not eligible:
            return {}
        best = eligible[0][0]
        out: dict[str, float] = defaultdict(float)
        for s, i in eligible:
            age = max(0.0, (self.base_time - int(ix.times[i])) / _SECONDS_PER_YEAR)
            weight = (s / best) * 0.5 ** (age / half_life) / math.log2(1 + int(ix.nfiles[i]))
            for f in ix.file_ids[ix.file_ptr[i]:ix.file_ptr[i + 1]].tolist():
                path = self.resolve(ix.paths[f], existing)
                if path is not None:
                    out[path] += weight
        return dict(out)

    def co_changed(self, seeds: dict[str, float], existing: set[str] | dict[str, object],
                   max_files: int = CO_MAX_FILES) -> dict[str, float]:
        """Files that changed with the seeds: sum over seeds of weight x share of its commits."""
        ix = self.index
        out: dict[str, float] = defaultdict(float)
        for seed, weight in seeds.items():
            commits: set[int] = set()
            for name in self.names_of(seed):
                f = ix.path_id.get(name)
                if f is None:
                    continue
                docs = ix.path_docs[ix.path_ptr[f]:ix.path_ptr[f + 1]]
                docs = docs[self.mask[docs]]
                commits.update(docs[(ix.nfiles[docs] >= 2) & (ix.nfiles[docs] <= max_files)].tolist())
            if not commits:
                continue
            together: Counter[str] = Counter()
            for i in commits:
                for f in ix.file_ids[ix.file_ptr[i]:ix.file_ptr[i + 1]].tolist():
                    path = self.resolve(ix.paths[f], existing)
                    if path is not None and path != seed:
                        together[path] += 1
            # +1: a file that changed once with a seed changed once is weak evidence, not certainty.
            for path, n in together.items():
                out[path] += weight * n / (len(commits) + 1)
        return dict(out)

    def messages(self, ids: list[int]) -> list[str]:
        """Subject lines of commits (for showing why a file was ranked)."""
        db = sqlite3.connect(str(self.index.db_path), timeout=60)
        try:
            out = []
            for i in ids:
                row = db.execute("SELECT message FROM commits WHERE idx = ?", (i,)).fetchone()
                out.append(row[0].split("\n")[0] if row else "")
            return out
        finally:
            db.close()
