"""Choose the stratified50 manifest: 50 SWE-bench Lite ids, the same for every config.

Rule (also in eval/stratified50.md): 15 django, 10 sympy, 8 matplotlib, 8 scikit-learn, and 9
from the other repos (one each, the largest of them gets the spare). Within a repo, instances are
sorted by difficulty proxy = lines changed by the gold patch (ties by id), cut into as many equal
bins as picks, and one is drawn per bin with a seeded RNG, so each repo's share spans easy to hard.

    python -m eval.make_stratified --dataset ../shared/data/swebench_lite.jsonl > eval/stratified50.txt
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import defaultdict

from eval.options import add_options, load_instances
from fixgraph.dataset import DatasetError, Instance
from scoring.verdict.judge import InputError

SEED = 20261130
FIXED = {"django/django": 15, "sympy/sympy": 10, "matplotlib/matplotlib": 8, "scikit-learn/scikit-learn": 8}
OTHERS = 9


def gold_size(inst: Instance) -> int:
    return sum(1 for ln in inst.patch.splitlines()
               if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


def quotas(by_repo: dict[str, list[Instance]]) -> dict[str, int]:
    out = dict(FIXED)
    others = sorted((r for r in by_repo if r not in FIXED), key=lambda r: (-len(by_repo[r]), r))
    for i, repo in enumerate(others):
        out[repo] = OTHERS // len(others) + (1 if i < OTHERS % len(others) else 0)
    return out


def choose(instances: list[Instance], seed: int = SEED) -> list[tuple[Instance, int]]:
    by_repo: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_repo[inst.repo].append(inst)
    rng = random.Random(seed)
    picked: list[tuple[Instance, int]] = []
    for repo, k in sorted(quotas(by_repo).items()):
        pool = sorted(by_repo.get(repo, []), key=lambda i: (gold_size(i), i.instance_id))
        if len(pool) < k:
            raise DatasetError(f"{repo} has {len(pool)} instances, {k} wanted")
        for b in range(k):
            lo, hi = b * len(pool) // k, (b + 1) * len(pool) // k
            inst = pool[rng.randrange(lo, hi)]
            picked.append((inst, b))
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_options(p, without={"repos", "only", "stride", "shard", "output", "resume"})
    p.add_argument("--seed", type=int, default=SEED)
    args = p.parse_args(argv)
    try:
        picks = choose(load_instances(args), args.seed)
    except InputError as exc:
        print(f"make_stratified: error: {exc}", file=sys.stderr)
        return 2
    print(f"# stratified50: made by eval/make_stratified.py --seed {args.seed}; rule in eval/stratified50.md")
    print("# instance_id  # repo, difficulty bin (0 = smallest gold patch), gold lines changed")
    for inst, b in picks:
        print(f"{inst.instance_id}  # {inst.repo} bin {b} gold {gold_size(inst)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
