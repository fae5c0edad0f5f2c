"""What the benchmarks over real agents' predictions share beside their options (eval.options): the
rows an interrupted run already wrote (``--resume``), how a row is written, and a run that a SIGTERM
ends with its figures printed."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar, overload

from fixgraph.dataset import Instance
from fixgraph.repo.workspace import find_mirror
from scoring.verdict.judge import run_reporting_errors

K = TypeVar("K")


def run_tag(args: argparse.Namespace) -> str:
    """A name for this run's own worktrees: shards run side by side on one cache, and two runs
    checking out their commits in one worktree would apply patches over each other's."""
    return args.shard.replace("/", "of") if args.shard else "all"


def mirrored_rows(rows: Iterable[dict[str, Any]], dataset: dict[str, Instance], repos: Path, only: set[str],
                  skipped: dict[str, int]) -> list[dict[str, Any]]:
    """The prediction rows of a dataset instance whose repository ``--only`` keeps and ``repos``
    mirrors; the others are counted in ``skipped`` by why."""
    kept = []
    for row in rows:
        inst = dataset.get(row["instance_id"])
        why = ("not in dataset" if inst is None else "other repo" if only and inst.repo not in only
               else "no mirror" if find_mirror(repos, inst.repo) is None else "")
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            kept.append(row)
    return kept


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


def instance_key(rec: dict[str, Any]) -> str:
    return rec["instance_id"]


def system_instance_key(rec: dict[str, Any]) -> tuple[str, str]:
    return rec["system"], rec["instance_id"]


def previous_rows(path: Path | None, key: Callable[[dict[str, Any]], K]) -> dict[K, dict[str, Any]]:
    """The rows an interrupted run wrote to ``path``, by ``key`` (:func:`instance_key`,
    :func:`system_instance_key`); a row that lacks a key's field is skipped, so it is judged again,
    and of two rows with one key the later wins."""
    rows: dict[K, dict[str, Any]] = {}
    for rec in written_rows(path):
        with contextlib.suppress(KeyError, TypeError):
            rows[key(rec)] = rec
    return rows


@overload
def open_rows(path: Path, resume: bool) -> TextIO: ...


@overload
def open_rows(path: None, resume: bool) -> None: ...


def open_rows(path: Path | None, resume: bool) -> TextIO | None:
    """``path`` opened for a run's rows (None without one): appended to when the run resumes, so the
    rows :func:`previous_rows` read stay, else emptied."""
    return path.open("a" if resume else "w", encoding="utf-8") if path is not None else None


# What a row must not carry of the machine that wrote it (rows are kept, see docs/results.md): a test
# run's folder (scoring/execution/testenv.py), a venv backend's env (scoring/execution/envs.py:
# <cache>/envs/<owner>+<name>__<version>/), pyenv's interpreters, the home folder.
_RUN_FOLDER = re.compile(r"/[\w./-]*?fixgraph-testruns[\w-]*/[0-9a-f]{6,}/")
_ENV_FOLDER = re.compile(r"(?:/[\w.-]+)*?/envs/[\w.-]+\+[\w.-]+__[\w.]+/")
_PYENV = re.compile(r"(?:/[\w.-]+)*?/\.pyenv/versions/[\w.-]+/")


def machine_neutral(text: str) -> str:
    """``text`` with this machine's paths as placeholders: ``<run>/``, ``<env>/``, ``<python>/``, ``~/``."""
    text = _PYENV.sub("<python>/", _ENV_FOLDER.sub("<env>/", _RUN_FOLDER.sub("<run>/", text)))
    home = str(Path.home())
    return text.replace(home + "/", "~/") if home.strip("/") else text


def write_row(out: TextIO | None, rec: dict[str, Any]) -> None:
    """``rec`` as one JSON line of ``out`` (nothing without a file), flushed at once: a run killed
    later keeps every row it judged. Paths of this machine in its messages become placeholders."""
    if out is not None:
        out.write(machine_neutral(json.dumps(rec)) + "\n")
        out.flush()


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_terminable(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A benchmark's run, where a terminated run still prints the figures for the rows it judged."""
    signal.signal(signal.SIGTERM, interrupt)
    return run_reporting_errors(run, args)
