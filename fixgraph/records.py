"""Resumable run records keyed by instance_id, written atomically.

Layout for a run id R:
  <predictions_dir>/<instance_id>.diff       the latest run's patch (EVAL_MODE)
  <runs_dir>/<R>/patches/<instance_id>.diff   this run's patch, which its record points at
  <predictions_dir>/<R>.jsonl                 official predictions, one line per task
  <runs_dir>/<R>/records/<instance_id>.json   everything else about the task
  <runs_dir>/<R>/checkpoints.sqlite           LangGraph checkpoints for tasks in flight
  <runs_dir>/<R>/billed/<instance_id>.jsonl   one line per LLM call charged (survives a kill)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fixgraph import redaction

RECORD_VERSION = 1
# Run ids and instance ids name files and folders: nothing that could climb out of them.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


class RunLockedError(Exception):
    """Another process holds this run id."""


def check_id(kind: str, value: str) -> str:
    """``value`` when it is safe as a file name; ValueError (one line) otherwise."""
    if not SAFE_ID.fullmatch(value) or ".." in value:
        raise ValueError(f"{kind} {value[:80]!r} is not allowed: use letters, digits and . _ + - "
                         "(no path separators, no '..')")
    return value


class RunLock:
    """An exclusive lock on a run id for this process's lifetime (or until ``release``): a second
    process with the same run id is refused instead of sharing the run's worktrees and records.
    The kernel drops the lock when the process dies, so a killed run never blocks the next."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self._fh = open(self.path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise RunLockedError(f"run {run_dir.name!r} is in progress in another process "
                                 f"(lock {self.path}); wait for it or use another --run-id") from None

    def release(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


def _read_umask() -> int:
    # os.umask can only be read by setting it; done once at import, before any worker thread.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _read_umask()


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` so that readers see the old file or the new one, never half of one.

    The file gets the mode ``open()`` would give it (0666 minus the umask, or the mode of the file
    it replaces), not mkstemp's 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o666 & ~UMASK
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: Path, shared: bool = False) -> Iterator[None]:
    """An advisory lock shared by threads and processes: exclusive, or ``shared`` with other
    shared holders (readers) while it excludes an exclusive one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_wal(path: Path, setup: Callable[[sqlite3.Connection], object] | None = None, *,
             check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection to the SQLite database at ``path`` in WAL mode, with a 60 s busy timeout.

    Switching a database to WAL does not wait on the busy timeout, nor does a schema write that
    raced another one: two threads or processes opening a new database at once could fail with
    "database is locked" (once in CI: two workers' first tasks opening a fresh blob cache). The
    switch and ``setup`` (creating the tables) run under a file lock beside the database."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(f".{path.name}.lock")):
        conn = sqlite3.connect(str(path), check_same_thread=check_same_thread, timeout=60)
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            if setup is not None:
                setup(conn)
        except BaseException:
            conn.close()
            raise
    return conn


def redact(text: str, secrets: list[str]) -> str:
    """``text`` without ``secrets`` nor the process's known ones (``fixgraph.redaction``)."""
    return redaction.redact(text, secrets)


class RunStore:
    """Where one run's predictions and records go."""

    def __init__(self, run_id: str, predictions_dir: Path, runs_dir: Path, model_name: str,
                 secrets: list[str] | None = None):
        self.run_id = check_id("run id", run_id)
        self.predictions_dir = predictions_dir
        self.run_dir = runs_dir / run_id
        self.records_dir = self.run_dir / "records"
        self.model_name = model_name
        self.secrets = secrets or []
        self.records_dir.mkdir(parents=True, exist_ok=True)
        predictions_dir.mkdir(parents=True, exist_ok=True)

    @property
    def jsonl_path(self) -> Path:
        return self.predictions_dir / f"{self.run_id}.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints.sqlite"

    def diff_path(self, instance_id: str) -> Path:
        """The latest patch for the task, whichever run wrote it."""
        return self.predictions_dir / f"{check_id('instance_id', instance_id)}.diff"

    def run_diff_path(self, instance_id: str) -> Path:
        """This run's own patch: another run with the same predictions folder does not overwrite it."""
        return self.run_dir / "patches" / f"{instance_id}.diff"

    def record_path(self, instance_id: str) -> Path:
        return self.records_dir / f"{check_id('instance_id', instance_id)}.json"

    def read_record(self, instance_id: str) -> dict[str, Any] | None:
        path = self.record_path(instance_id)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

    def is_done(self, instance_id: str) -> bool:
        """A task is done when its final record exists; failed tasks count as done too."""
        rec = self.read_record(instance_id)
        return bool(rec and rec.get("final"))

    def records(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.records_dir.glob("*.json")):
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(path.read_text(encoding="utf-8")))
        return out

    def write_prediction(self, instance_id: str, patch: str) -> None:
        """The .diff files first (the run's own, then the latest), then the JSONL line; all atomic,
        one line per task."""
        patch = redact(patch, self.secrets)
        atomic_write(self.run_diff_path(instance_id), patch)
        atomic_write(self.diff_path(instance_id), patch)
        line = {"instance_id": instance_id, "model_name_or_path": self.model_name, "model_patch": patch}
        with file_lock(self.predictions_dir / f".{self.run_id}.lock"):
            rows: list[str] = []
            if self.jsonl_path.is_file():
                for raw in self.jsonl_path.read_text(encoding="utf-8").splitlines():
                    if not raw.strip():
                        continue
                    try:
                        if json.loads(raw).get("instance_id") == instance_id:
                            continue
                    except json.JSONDecodeError:
                        continue  # a torn line from another tool; drop it rather than propagate it
                    rows.append(raw)
            rows.append(json.dumps(line))
            atomic_write(self.jsonl_path, "\n".join(rows) + "\n")

    def billed_path(self, instance_id: str) -> Path:
        return self.run_dir / "billed" / f"{check_id('instance_id', instance_id)}.jsonl"

    def add_billed(self, instance_id: str, tokens: int, dollars: float) -> None:
        """Append one charged call. One small O_APPEND write: a kill leaves it whole or absent."""
        path = self.billed_path(instance_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"tokens": tokens, "dollars": dollars}) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def billed(self, instance_id: str) -> dict[str, float]:
        """Everything charged to a task in this run, including calls a killed process never checkpointed."""
        out = {"tokens": 0, "dollars": 0.0, "calls": 0}
        path = self.billed_path(instance_id)
        if not path.is_file():
            return out
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(raw)
            except json.JSONDecodeError:
                continue
            out["tokens"] += int(row.get("tokens", 0))
            out["dollars"] += float(row.get("dollars", 0.0))
            out["calls"] += 1
        return out

    def billed_dollars(self) -> float:
        """The whole run's spending so far, from the ledgers."""
        folder = self.run_dir / "billed"
        if not folder.is_dir():
            return 0.0
        return sum(self.billed(p.stem)["dollars"] for p in folder.glob("*.jsonl"))

    def write_record(self, record: dict[str, Any]) -> None:
        record = {"record_version": RECORD_VERSION, "run_id": self.run_id, **record}
        text = redact(json.dumps(record, indent=2, sort_keys=True, default=str), self.secrets)
        atomic_write(self.record_path(record["instance_id"]), text + "\n")
