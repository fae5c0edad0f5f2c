"""verified50: how it is drawn, and that the committed manifest is what the rule draws."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from eval import make_verified50 as mv
from fixgraph.dataset import DatasetError, Instance, load_jsonl, read_manifest, select

ROOT = Path(__file__).resolve().parents[2]
SHARED = next((d / "data" for d in (ROOT.parent / "shared", ROOT.parents[1] / "shared")
               if (d / "data" / "swebench_verified_dev.jsonl").is_file()), None)


def inst(iid: str) -> Instance:
    owner, _, rest = iid.partition("__")
    return Instance.model_validate({"instance_id": iid, "repo": f"{owner}/{rest.rsplit('-', 1)[0]}",
                                    "base_commit": "0" * 40, "problem_statement": "p"})


def test_repos_share_by_their_weight_in_the_whole_set_and_each_gets_one() -> None:
    # The whole set: 80 big, 15 mid, 5 tiny; the development part holds 20, 10, 2 of them.
    difficulty = {f"big__big-{n}": "<15 min fix" if n % 2 else "15 min - 1 hour" for n in range(80)}
    difficulty |= {f"mid__mid-{n}": "1-4 hours" for n in range(15)}
    difficulty |= {f"tiny__tiny-{n}": ">4 hours" for n in range(5)}
    dev = [inst(f"big__big-{n}") for n in range(20)] + [inst(f"mid__mid-{n}") for n in range(10)]
    dev += [inst("tiny__tiny-0"), inst("tiny__tiny-1")]
    picks = mv.choose(dev, difficulty, size=10)
    repos = Counter(i.repo for i, _ in picks)
    assert repos == {"big/big": 8, "mid/mid": 1, "tiny/tiny": 1}  # 8, 1.5 and 0.5 seats; tiny's is its floor
    # Within a repository the buckets share as in the whole set: big is half easy, half medium.
    assert Counter(b for i, b in picks if i.repo == "big/big") == {"<15 min fix": 4, "15 min - 1 hour": 4}
    assert len({i.instance_id for i, _ in picks}) == 10
    assert mv.choose(dev, difficulty, size=10) == picks  # fixed: the seed decides


def test_a_row_without_a_bucket_or_too_few_rows_is_one_line() -> None:
    with pytest.raises(DatasetError, match="x__x-1 has no difficulty bucket"):
        mv.choose([inst("x__x-1")], {}, size=1)
    with pytest.raises(DatasetError, match="only 1 instances can be drawn, 2 wanted"):
        mv.choose([inst("x__x-1")], {"x__x-1": "<15 min fix"}, size=2)


def test_the_committed_manifest_is_what_the_rule_draws(capsys: pytest.CaptureFixture[str]) -> None:
    ids = read_manifest("verified50")
    assert len(ids) == len(set(ids)) == 50 and len({i.rsplit("-", 1)[0] for i in ids}) == 12
    if SHARED is None:
        # A clone without the development file beside it (CI's) checks the manifest's shape only;
        # the draw is checked where the data is, and .ci/run fails on a skip.
        return
    dev = SHARED / "swebench_verified_dev.jsonl"
    assert mv.main(["--dataset", str(dev), "--difficulty", str(SHARED / "swebench_verified_difficulty.json")]) == 0
    assert capsys.readouterr().out == (ROOT / "eval" / "verified50.txt").read_text()
    chosen = select(load_jsonl(dev), "verified50")
    assert len(chosen) == 50 and len(read_manifest("verified50")) == 50
    buckets = json.loads((SHARED / "swebench_verified_difficulty.json").read_text())
    assert len({buckets[i.instance_id] for i in chosen}) >= 3 and len({i.repo for i in chosen}) == 12
