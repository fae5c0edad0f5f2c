"""Choose the verified50 manifest: 50 SWE-bench Verified ids from the development file, the same for
every config.

Rule (also in eval/verified50.md): the 50 are shared among the repositories in proportion to their
share of all 500 Verified instances (largest remainder, at least one each); each repository's picks
are shared among the dataset's difficulty buckets in proportion to that repository's own bucket
counts over the 500 (largest remainder, no more than the development file holds); within a
(repository, bucket) cell the picks are drawn with a seeded RNG from the development rows sorted by id.

    python -m eval.make_verified50 --dataset ../shared/data/swebench_verified_dev.jsonl \\
        --difficulty ../shared/data/swebench_verified_difficulty.json > eval/verified50.txt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

from fixgraph.dataset import DatasetError, Instance, load_jsonl

SEED = 20261205
SIZE = 50
BUCKETS = ("<15 min fix", "15 min - 1 hour", "1-4 hours", ">4 hours")


def repo_of(instance_id: str) -> str:
    owner, _, rest = instance_id.partition("__")
    return f"{owner}/{rest.rsplit('-', 1)[0]}"


def largest_remainder(weights: dict[str, int], total: int, floor: dict[str, int], cap: dict[str, int]) -> dict[str, int]:
    """``total`` seats in proportion to ``weights``: each key gets at least ``floor`` and at most ``cap``."""
    whole = sum(weights.values())
    exact = {k: total * w / whole for k, w in weights.items()}
    seats = {k: min(cap[k], max(floor.get(k, 0), int(exact[k]))) for k in weights}
    while sum(seats.values()) < total:
        open_ = sorted(k for k in weights if seats[k] < cap[k])
        if not open_:
            raise DatasetError(f"only {sum(seats.values())} instances can be drawn, {total} wanted")
        # One seat each round, to the key furthest below its exact share.
        best = max(open_, key=lambda k: (exact[k] - seats[k], weights[k]))
        seats[best] += 1
    return seats


def choose(instances: list[Instance], difficulty: dict[str, str], seed: int = SEED,
           size: int = SIZE) -> list[tuple[Instance, str]]:
    missing = [i.instance_id for i in instances if i.instance_id not in difficulty]
    if missing:
        raise DatasetError(f"{missing[0]} has no difficulty bucket")
    cells: dict[tuple[str, str], list[Instance]] = defaultdict(list)
    for inst in sorted(instances, key=lambda i: i.instance_id):
        cells[(inst.repo, difficulty[inst.instance_id])].append(inst)
    all_by_repo = Counter(repo_of(i) for i in difficulty)
    dev_by_repo = Counter(i.repo for i in instances)
    repos = largest_remainder({r: all_by_repo[r] for r in dev_by_repo}, size, {r: 1 for r in dev_by_repo},
                              dict(dev_by_repo))
    rng = random.Random(seed)
    picked: list[tuple[Instance, str]] = []
    for repo in sorted(repos):
        weights = Counter(b for i, b in difficulty.items() if repo_of(i) == repo)
        cap = {b: len(cells[(repo, b)]) for b in weights}
        for bucket, k in sorted(largest_remainder(dict(weights), repos[repo], {}, cap).items(),
                                key=lambda kv: BUCKETS.index(kv[0])):
            picked.extend((inst, bucket) for inst in rng.sample(cells[(repo, bucket)], k))
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--dataset", type=Path, default=Path("../shared/data/swebench_verified_dev.jsonl"))
    p.add_argument("--difficulty", type=Path, default=Path("../shared/data/swebench_verified_difficulty.json"))
    p.add_argument("--seed", type=int, default=SEED)
    args = p.parse_args(argv)
    try:
        try:
            difficulty = json.loads(args.difficulty.read_text())
        except (OSError, ValueError) as exc:
            raise DatasetError(f"--difficulty {args.difficulty}: {exc}") from None
        if not isinstance(difficulty, dict) or not difficulty:
            raise DatasetError(f"--difficulty {args.difficulty}: not a JSON object of instance id to bucket")
        picks = choose(load_jsonl(args.dataset), difficulty, args.seed)
    except DatasetError as exc:
        print(f"make_verified50: error: {exc}", file=sys.stderr)
        return 2
    print(f"# verified50: made by eval/make_verified50.py --seed {args.seed}; rule in eval/verified50.md")
    print("# instance_id  # repo, version, difficulty bucket")
    for inst, bucket in picks:
        print(f"{inst.instance_id}  # {inst.repo} {inst.version} {bucket}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
