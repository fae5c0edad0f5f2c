"""What the benchmarks over real agents' predictions share: which rows to judge (``--stride``,
``--limit``, ``--shard``), the rows an interrupted run already wrote (``--resume``), and a run
that a SIGTERM ends with its figures printed."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from scoring.critic import InputError, run_reporting_errors

T = TypeVar("T")


def sample(rows: list[T], stride: int, limit: int, shard: tuple[int, int] | None) -> list[T]:
    """Every ``stride``-th row, the first ``limit`` of those, then shard I of N."""
    rows = rows[::stride] if stride > 1 else rows
    rows = rows[:limit] if limit else rows
    return rows[shard[0]::shard[1]] if shard else rows


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard I/N`` as (I, N); a one-line InputError for anything else."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise InputError(f"--shard: expected I/N, e.g. 0/2, got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise InputError(f"--shard: need 0 <= I < N, got {text!r}")
    return index, count


def written_rows(path: Path | None) -> Iterator[dict[str, Any]]:
    """The rows a run wrote to ``path`` (one JSON object a line); a line cut by a kill is skipped,
    so the row is judged again."""
    if path is None or not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                yield rec


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_terminable(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A benchmark's run, where a terminated run still prints the figures for the rows it judged."""
    signal.signal(signal.SIGTERM, interrupt)
    return run_reporting_errors(run, args)
