"""What the benchmarks over real agents' predictions share: which rows to judge (``--stride``,
``--limit``, ``--shard``), the rows an interrupted run already wrote (``--resume``), how a row is
written, and a run that a SIGTERM ends with its figures printed."""

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
from scoring.verdict.judge import InputError, run_reporting_errors

T = TypeVar("T")
K = TypeVar("K")


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


def add_row_options(p: argparse.ArgumentParser, *, rows: str, predictions: str, many: bool = False,
                    output: Path | None = None, config: str = "") -> None:
    """The options every benchmark over real agents' predictions takes, worded for its ``rows``
    ("labelled rows", "instances"): which predictions, dataset and mirrors, which rows of them
    (``--only``, ``--stride``, ``--limit``, ``--shard``), the config, and where rows go and resume.
    Read them back with :func:`row_choice`."""
    p.add_argument("--predictions", type=Path, nargs="+" if many else None, required=True, help=predictions)
    p.add_argument("--dataset", type=Path, default=Path("../shared/data/swebench_lite.jsonl"))
    p.add_argument("--repos", type=Path, required=True, help="folder of repository mirrors (owner+name/repo)")
    p.add_argument("--only", default="", help="comma-separated owner/name repos (default: every mirrored one)")
    p.add_argument("--stride", type=int, default=1, help=f"judge every K-th of the {rows} (a spread across repos)")
    p.add_argument("--limit", type=int, default=0, help=f"judge only the first N {rows} (after --stride)")
    p.add_argument("--shard", default="", metavar="I/N",
                   help=f"judge only shard I of N (0-based) of the {rows}: run N shards side by side with separate "
                        "--output files, then concatenate them and count them with --resume")
    p.add_argument("--config", default="redo", help=config or "the run config (configs/NAME.toml)")
    p.add_argument("-o", "--output", type=Path, default=output, help="per-row results, JSON Lines"
                   + (" (default: %(default)s)" if output else ""))
    p.add_argument("--resume", action="store_true",
                   help="count the rows already in --output (from an interrupted run) instead of judging them again")


def row_choice(args: argparse.Namespace) -> tuple[set[str], tuple[int, int] | None]:
    """The repositories ``--only`` names and the ``--shard``, with one-line errors for a bad
    ``--stride``, ``--limit``, ``--shard`` or ``--repos``, before any work."""
    if args.stride < 1:
        raise InputError("--stride must be at least 1")
    if args.limit < 0:
        raise InputError("--limit must not be negative")
    shard = parse_shard(args.shard) if args.shard else None
    if not args.repos.is_dir():
        raise InputError(f"--repos: not a directory: {args.repos}")
    return {r.strip() for r in args.only.split(",") if r.strip()}, shard


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
