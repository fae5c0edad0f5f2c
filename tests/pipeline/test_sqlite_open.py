"""Fresh SQLite databases opened by many threads and processes at once (records.open_wal).

Switching a new database to WAL does not wait on SQLite's busy timeout: before open_wal, two
workers' first tasks opening a fresh blob cache at the same moment could fail one of them with
"database is locked" (seen once in CI, in the fault bench's clean run)."""
from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from fixgraph.localize import _BlobCache
from fixgraph.records import open_wal
from pipeline.tasks import _checkpointer


def _race(n: int, open_one) -> list[BaseException]:
    """``open_one`` called by ``n`` threads released together; the errors they raised."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        barrier.wait()
        try:
            open_one(i)
        except BaseException as exc:  # collected: the test asserts there are none
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.slow
def test_threads_opening_a_fresh_blob_cache_together_all_get_it(tmp_path):
    for round_ in range(15):
        path = tmp_path / f"r{round_}" / "blobs.sqlite"

        def open_one(i: int, path: Path = path) -> None:
            cache = _BlobCache(path)
            try:
                cache.put_many({f"k{i}": {"i": i}})
            finally:
                cache.close()

        assert _race(6, open_one) == []
        cache = _BlobCache(path)
        try:
            assert cache.get_many([f"k{i}" for i in range(6)]) == {f"k{i}": {"i": i} for i in range(6)}
        finally:
            cache.close()
        with sqlite3.connect(str(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.slow
def test_threads_opening_a_fresh_checkpoint_database_together_all_get_it(tmp_path):
    for round_ in range(15):
        path = tmp_path / f"r{round_}" / "checkpoints.sqlite"

        def open_one(i: int, path: Path = path) -> None:
            saver = _checkpointer(path)
            assert saver is not None
            try:
                saver.conn.execute("SELECT count(*) FROM checkpoints").fetchone()
            finally:
                saver.conn.close()

        assert _race(6, open_one) == []


def _open_and_write(path: str, i: int, start: Any) -> None:
    start.wait()
    db = open_wal(Path(path), lambda c: c.execute("CREATE TABLE IF NOT EXISTS t (i INTEGER)"))
    with db:
        db.execute("INSERT INTO t VALUES (?)", (i,))
    db.close()


@pytest.mark.slow
def test_processes_opening_a_fresh_database_together_all_write(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(3):
        path = tmp_path / f"r{round_}.sqlite"
        start = ctx.Event()
        procs = [ctx.Process(target=_open_and_write, args=(str(path), i, start)) for i in range(4)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        with sqlite3.connect(str(path)) as db:
            assert sorted(r[0] for r in db.execute("SELECT i FROM t")) == [0, 1, 2, 3]


def test_a_setup_that_fails_closes_the_connection_and_says_why(tmp_path):
    def bad(db: sqlite3.Connection) -> None:
        db.execute("SELECT * FROM no_such_table")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        open_wal(tmp_path / "x.sqlite", bad)
    # The lock was released: the next opener is not kept waiting.
    db = open_wal(tmp_path / "x.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
