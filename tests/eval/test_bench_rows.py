"""The options the benchmarks over agents' predictions share (eval.options): the same words, and the
same one-line error for a bad choice of rows, before any work; and the rows a run writes and a
resumed run reads back (eval.rows)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from eval import critic_bench, regression_bench, select_bench
from eval.options import check_options, only_repos, sample
from eval.rows import (
    instance_key,
    open_rows,
    previous_rows,
    run_tag,
    system_instance_key,
    write_row,
)

BENCHES: dict[str, Callable[[list[str]], int]] = {
    "critic_bench": critic_bench.main, "regression_bench": regression_bench.main, "select_bench": select_bench.main}


@pytest.mark.parametrize("bench", sorted(BENCHES))
@pytest.mark.parametrize(("extra", "error"), [
    (["--stride", "0"], "error: --stride must be at least 1"),
    (["--limit", "-1"], "error: --limit must not be negative"),
    (["--shard", "2/2"], "error: --shard: need 0 <= I < N, got '2/2'"),
    (["--shard", "half"], "error: --shard: expected I/N, e.g. 0/2, got 'half'"),
    (["--repos", "no-such-folder"], "error: --repos: not a directory: no-such-folder"),
])
def test_a_bad_choice_of_rows_is_one_line_and_exit_2(bench: str, extra: list[str], error: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # The predictions file does not exist either: the choice of rows is checked first.
    argv = ["--predictions", str(tmp_path / "preds.jsonl"), "--repos", str(tmp_path), "-o", str(tmp_path / "o.jsonl")]
    assert BENCHES[bench]([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(error) and "\n" not in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_only_and_limit_pick_the_same_rows_in_every_bench(tmp_path: Path) -> None:
    """--only keeps a repository's rows and --limit the first N after --stride, in each bench's parser."""
    for bench in (critic_bench, regression_bench, select_bench):
        args = bench.parser().parse_args(["--predictions", "p.jsonl", "--repos", str(tmp_path), "--only",
                                          "a/b, c/d", "--limit", "3", "--stride", "2", "--shard", "1/2"])
        shard = check_options(args)
        assert only_repos(args.only, {"a/b", "c/d", "e/f"}) == {"a/b", "c/d"} and shard == (1, 2)
        # One repository: every second row, the first three of those, the second shard of two.
        assert sample(list(range(20)), lambda _: "a/b", args.stride, args.limit, shard) == [2]


def test_a_resumed_run_keeps_its_rows_and_reads_back_each_whole_one(tmp_path: Path) -> None:
    out_path = tmp_path / "rows.jsonl"
    with open_rows(out_path, resume=False) as out:
        write_row(out, {"instance_id": "a", "system": "s", "n": 1})
        write_row(out, {"system": "s"})  # no instance id: judged again
    with open_rows(out_path, resume=True) as out:
        write_row(out, {"instance_id": "a", "system": "t", "n": 2})
        out.write('{"instance_id": "b", "sys')  # a line cut by a kill
    assert previous_rows(out_path, instance_key) == {"a": {"instance_id": "a", "system": "t", "n": 2}}
    assert set(previous_rows(out_path, system_instance_key)) == {("s", "a"), ("t", "a")}
    with open_rows(out_path, resume=False):
        pass
    assert previous_rows(out_path, instance_key) == {}
    assert open_rows(None, resume=True) is None and previous_rows(None, instance_key) == {}
    write_row(None, {"instance_id": "c"})  # a run without --output writes nothing


def test_shards_run_side_by_side_each_in_worktrees_of_their_own() -> None:
    # Two shards on one cache once shared a worktree per repository: one checked out its commit
    # while the other held a patch applied there, and git apply -R failed.
    tags = {run_tag(argparse.Namespace(shard=s)) for s in ("", "0/3", "1/3", "2/3")}
    assert tags == {"all", "0of3", "1of3", "2of3"}


def test_a_row_carries_no_path_of_the_machine_that_wrote_it(tmp_path: Path) -> None:
    # Rows are kept (docs/results.md); a runner's traceback held a pyenv interpreter's path and a run's folder.
    from eval.rows import write_row

    reason = ('File "/opt/builder/.pyenv/versions/3.8.18/lib/python3.8/unittest/loader.py", line 154; '
              "(/tmp/fixgraph-testruns-0/b21aff27a693/repo/sympy/__init__.py) "
              f"{Path.home()}/notes.txt tests/m2m_through/models.py "
              "/srv/x/cache/fixgraph/envs/django+django__3.0/venv/lib/python3.6/site-packages/a.py")
    out = tmp_path / "rows.jsonl"
    with out.open("w") as fh:
        write_row(fh, {"reason": reason})
    row = json.loads(out.read_text())
    assert row["reason"] == ('File "<python>/lib/python3.8/unittest/loader.py", line 154; '
                             "(<run>/repo/sympy/__init__.py) ~/notes.txt tests/m2m_through/models.py "
                             "<env>/venv/lib/python3.6/site-packages/a.py")
