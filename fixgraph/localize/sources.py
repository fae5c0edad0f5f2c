"""Where file contents come from: a repository tree at one commit (a worktree or a bare
repository), the per-blob cache of analyses shared by every commit and process, and the per-commit
snapshot (every file's analysis in one file, terms as an inverted index) a warm load reads instead.

A symlink is listed but never read, wherever it points.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import threading
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from fixgraph.localize.files import MAX_FILE_BYTES, FileInfo, _info_from_json, _info_to_json
from fixgraph.records import open_wal
from fixgraph.repo.workspace import Worktree

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


# ---- the per-commit snapshot ----------------------------------------------------------------

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
