"""The options the benchmarks share, and the rows they choose with them.

Every benchmark takes the task set (``--dataset``, one default for all), the folder of mirrors
(``--repos``), which repositories (``--only``), every K-th instance of each repository
(``--stride``), one shard of those (``--shard``), where its rows go (``-o/--output``) and whether
an interrupted run's rows count (``--resume``); a benchmark leaves out the ones it has no use for.
The stride is per repository so that a small repository keeps rows at any K: a global stride over
rows sorted by repository gives a repository of 5 rows none at K=6 or one at random.

A bad value is one line and exit 2 before any work: the helpers raise
:class:`~scoring.verdict.judge.InputError`, which every benchmark prints as one line."""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, TypeVar

from fixgraph.dataset import DATASET_HELP, DEFAULT_DATASET, DatasetError, Instance, load_dataset_any
from fixgraph.repo.workspace import find_mirror
from scoring.verdict.judge import InputError

T = TypeVar("T")

COMMON = ("dataset", "repos", "only", "stride", "shard", "output", "resume")
STRIDE_HELP = ("every K-th {rows} of EACH REPOSITORY: a stride per repository, so each keeps its first and a "
               "small one keeps rows at any K")


def add_options(p: argparse.ArgumentParser, *, rows: str = "instance", without: Collection[str] = (),
                repos_required: bool = True, stride: int = 1, output: Path | None = None,
                output_help: str = "per-row results, JSON Lines") -> None:
    """The common options (:data:`COMMON`) but those named in ``without``, worded for the bench's
    ``rows`` ("instance", "row"). ``--out`` stays a spelling of ``--output`` for the benches whose
    documented commands use it. Check them with :func:`check_options`."""
    unknown = set(without) - set(COMMON)
    if unknown:
        raise ValueError(f"not a common option: {', '.join(sorted(unknown))}")
    keep = [name for name in COMMON if name not in without]
    if "dataset" in keep:
        p.add_argument("--dataset", default=DEFAULT_DATASET, help=DATASET_HELP)
    if "repos" in keep:
        p.add_argument("--repos", type=Path, required=repos_required, default=None, metavar="DIR",
                       help="folder of repository mirrors (owner+name/repo)")
    if "only" in keep:
        p.add_argument("--only", default="", metavar="REPO[,REPO...]",
                       help="comma-separated repositories, owner/name or name (default: every mirrored one)")
    if "stride" in keep:
        p.add_argument("--stride", type=int, default=stride, metavar="K",
                       help=STRIDE_HELP.format(rows=rows) + " (default: %(default)s)")
    if "shard" in keep:
        p.add_argument("--shard", default="", metavar="I/N",
                       help="only shard I of N (0-based), after --stride: run N shards side by side, each with its "
                            "own output")
    if "output" in keep:
        p.add_argument("-o", "--output", "--out", dest="output", type=Path, default=output,
                       help=output_help + (" (default: %(default)s)" if output else ""))
    if "resume" in keep:
        p.add_argument("--resume", action="store_true",
                       help="keep the rows already in the output (of an interrupted run) and do only the others")


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard I/N`` as (I, N); a one-line InputError for anything else."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise InputError(f"--shard: expected I/N, e.g. 0/2, got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise InputError(f"--shard: need 0 <= I < N, got {text!r}")
    return index, count


def check_options(args: argparse.Namespace) -> tuple[int, int] | None:
    """The ``--shard`` (None without one), after one-line errors for a bad ``--stride``, ``--limit``,
    ``--shard`` or ``--repos`` of those the bench has; before any work."""
    if getattr(args, "stride", 1) < 1:
        raise InputError("--stride must be at least 1")
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 0:
        raise InputError("--limit must not be negative")
    shard = parse_shard(args.shard) if getattr(args, "shard", "") else None
    repos = getattr(args, "repos", None)
    if repos is not None and not repos.is_dir():
        raise InputError(f"--repos: not a directory: {repos}")
    return shard


def load_instances(args: argparse.Namespace) -> list[Instance]:
    """``--dataset``'s instances through the one loader (a hub set's name or a JSONL path); a bad
    one is an InputError. A hub set is cached under ``--cache-dir`` or ``FIXGRAPH_CACHE_DIR``."""
    cache_dir = getattr(args, "cache_dir", None) or Path(os.environ.get("FIXGRAPH_CACHE_DIR", ".cache/fixgraph"))
    try:
        return load_dataset_any(args.dataset, cache_dir)
    except DatasetError as exc:
        raise InputError(str(exc)) from None


def dataset_map(args: argparse.Namespace) -> tuple[dict[str, Instance], set[str]]:
    """``--dataset``'s instances by id, and ``--only``'s repositories among theirs (empty: all)."""
    dataset = {inst.instance_id: inst for inst in load_instances(args)}
    return dataset, only_repos(getattr(args, "only", ""), {inst.repo for inst in dataset.values()})


def row_repo(dataset: dict[str, Instance]) -> Callable[[dict[str, Any]], str]:
    """The repository of a prediction row (keyed by ``instance_id``) of ``dataset``: the key of
    :func:`sample`'s stride over such rows."""
    return lambda row: dataset[row["instance_id"]].repo


def only_repos(text: str, known: Iterable[str]) -> set[str]:
    """``--only``'s repositories as owner/name (empty: no restriction). A name alone stands for the
    one repository of ``known`` (the dataset's) with that name; a name of none is an InputError."""
    known = set(known)
    by_name: dict[str, set[str]] = defaultdict(set)
    for repo in known:
        by_name[repo.rsplit("/", 1)[-1]].add(repo)
    chosen: set[str] = set()
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if word in known:
            chosen.add(word)
        elif len(by_name.get(word, ())) == 1:
            chosen |= by_name[word]
        elif word in by_name:
            raise InputError(f"--only: {word!r} names several repositories ({', '.join(sorted(by_name[word]))}); "
                             "write owner/name")
        else:
            raise InputError(f"--only: no repository {word!r} in the dataset (it has {', '.join(sorted(known))})")
    return chosen


def per_repository(rows: Iterable[T], stride: int, repo: Callable[[T], str], offset: int = 0) -> list[T]:
    """Every ``stride``-th of each repository's rows from its ``offset``-th, counted in the order
    given; the rows kept stay in that order."""
    seen: dict[str, int] = defaultdict(int)
    kept = []
    for row in rows:
        name = repo(row)
        if seen[name] % stride == offset:
            kept.append(row)
        seen[name] += 1
    return kept


def take(rows: list[T], limit: int | None, shard: tuple[int, int] | None) -> list[T]:
    """The first ``limit`` rows (all without one), then shard I of N of those."""
    rows = rows[:limit] if limit else rows
    return rows[shard[0]::shard[1]] if shard else rows


def sample(rows: Iterable[T], repo: Callable[[T], str], stride: int, limit: int | None = None,
           shard: tuple[int, int] | None = None) -> list[T]:
    """``--stride`` per repository, then ``--limit``, then ``--shard``: the rows a bench judges."""
    return take(per_repository(rows, stride, repo), limit, shard)


def mirrored(instances: Iterable[Instance], repos: Path, only: set[str]) -> list[Instance]:
    """The instances of ``--only``'s repositories (all without it) that have a mirror under ``repos``."""
    has_mirror: dict[str, bool] = {}
    kept = []
    for inst in instances:
        if only and inst.repo not in only:
            continue
        if inst.repo not in has_mirror:
            has_mirror[inst.repo] = find_mirror(repos, inst.repo) is not None
        if has_mirror[inst.repo]:
            kept.append(inst)
    return kept


def instance_repo(inst: Instance) -> str:
    return inst.repo


def add_row_options(p: argparse.ArgumentParser, *, rows: str, predictions: str, many: bool = False,
                    output: Path | None = None, config: str = "") -> None:
    """The options of a benchmark over real agents' predictions, worded for its ``rows`` ("labelled
    row", "instance"): which predictions, the common ones, ``--limit`` and the config."""
    p.add_argument("--predictions", type=Path, nargs="+" if many else None, required=True, help=predictions)
    add_options(p, rows=rows, output=output)
    p.add_argument("--limit", type=int, default=0, help=f"judge only the first N {rows}s (after --stride)")
    p.add_argument("--config", default="redo", help=config or "the run config (configs/NAME.toml)")
