"""The options every benchmark shares (eval.options): one default for --dataset, a stride per
repository then the shard, --only by owner/name or name, and a bad value as one line and exit 2
before any work."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import pytest

from eval import e2e_bench, options
from eval.options import add_options, check_options, dataset_map, only_repos, per_repository, sample
from fixgraph.dataset import DEFAULT_DATASET
from scoring.verdict.judge import InputError
from tests.test_docs import capture_parser

# Every benchmark that reads a dataset, but localize_warm_bench (its worker runs this checkout's
# script on a reference revision's packages, which may lack eval.options) and the runner and grader
# (eval.run, eval.grade: no row options).
BENCHES = ("build_bench", "canary_bench", "critic_bench", "e2e_bench", "env_bench", "gold_bench", "gold_critic",
           "grade_fidelity", "image_test_count", "issue_code_bench", "local_model_smoke", "localization_bench",
           "make_stratified", "no_tests_bench", "pipeline_bench", "regression_bench", "repro_bench",
           "runtime_ceiling", "select_bench")

ROWS = [("a/x", 0), ("a/x", 1), ("b/y", 0), ("a/x", 2), ("b/y", 1), ("c/z", 0), ("a/x", 3), ("b/y", 2)]


def repo(row: tuple[str, int]) -> str:
    return row[0]


def parse(argv: list[str], **kw: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_options(p, **kw)  # type: ignore[arg-type]
    return p.parse_args(argv)


def test_the_stride_is_per_repository_in_the_order_given() -> None:
    # Every repository keeps its first row, however few it has; the kept rows keep their order.
    assert per_repository(ROWS, 2, repo) == [("a/x", 0), ("b/y", 0), ("a/x", 2), ("c/z", 0), ("b/y", 2)]
    assert per_repository(ROWS, 1, repo) == ROWS
    assert per_repository(ROWS, 9, repo) == [("a/x", 0), ("b/y", 0), ("c/z", 0)]


def test_the_shard_comes_after_the_stride_and_the_limit() -> None:
    strided = per_repository(ROWS, 2, repo)
    shards = [sample(ROWS, repo, 2, None, (i, 2)) for i in range(2)]
    assert sorted(shards[0] + shards[1]) == sorted(strided) and not set(shards[0]) & set(shards[1])
    assert sample(ROWS, repo, 2, 3, (1, 2)) == [("b/y", 0)]


def test_only_takes_owner_name_or_name() -> None:
    known = {"django/django", "pallets/flask", "psf/requests"}
    assert only_repos("django, pallets/flask", known) == {"django/django", "pallets/flask"}
    assert only_repos("", known) == set()
    with pytest.raises(InputError, match="no repository 'flsk'"):
        only_repos("flsk", known)
    with pytest.raises(InputError, match="names several repositories"):
        only_repos("x", {"a/x", "b/x"})


def test_every_option_has_one_default_and_a_bench_leaves_out_what_it_does_not_use(tmp_path: Path) -> None:
    args = parse(["--repos", str(tmp_path)])
    assert args.dataset == DEFAULT_DATASET and args.stride == 1 and args.shard == "" and not args.resume
    assert args.output is None and args.only == ""
    # --out is another spelling of -o/--output: the benches' documented commands use both.
    assert parse(["--repos", ".", "--out", "r.jsonl"]).output == parse(["--repos", ".", "-o", "r.jsonl"]).output
    kept = parse([], without={"repos", "shard", "resume", "output"})
    assert not {"repos", "shard", "resume", "output"} & set(vars(kept))
    with pytest.raises(ValueError):
        add_options(argparse.ArgumentParser(), without={"strid"})
    p = argparse.ArgumentParser()
    add_options(p)
    assert "EACH REPOSITORY" in p.format_help().replace("\n", " ")


@pytest.mark.parametrize("bench", BENCHES)
def test_every_bench_takes_the_shared_options(bench: str) -> None:
    """One --dataset default, a stride per repository, -o/--output: whichever of them a bench has."""
    module = importlib.import_module(f"eval.{bench}")
    actions = {a.dest: a for a in capture_parser(lambda: module.main([]))._actions}
    assert actions["dataset"].default == DEFAULT_DATASET
    if "stride" in actions:
        assert "EACH REPOSITORY" in (actions["stride"].help or "")
    if "output" in actions:
        assert {"-o", "--output"} <= set(actions["output"].option_strings)


@pytest.mark.parametrize(("argv", "error"), [
    (["--stride", "0"], "--stride must be at least 1"),
    (["--shard", "2/2"], "--shard: need 0 <= I < N, got '2/2'"),
    (["--shard", "1of2"], "--shard: expected I/N, e.g. 0/2, got '1of2'"),
    (["--repos", "no-such-folder"], "--repos: not a directory: no-such-folder"),
])
def test_a_bad_value_is_one_line(argv: list[str], error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as got:
        check_options(parse(["--repos", str(tmp_path), *argv]))
    assert str(got.value) == error


def _dataset(path: Path, repos: list[str]) -> Path:
    rows = [{"instance_id": f"{r.replace('/', '__')}-{n}", "repo": r, "base_commit": "0" * 40,
             "problem_statement": "p"} for n, r in enumerate(repos)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_loader_gives_the_dataset_map_and_only(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds.jsonl", ["a/x", "b/y", "a/x"])
    dataset, only = dataset_map(parse(["--dataset", str(ds), "--only", "x"], without={"repos"}))
    assert sorted(dataset) == ["a__x-0", "a__x-2", "b__y-1"] and only == {"a/x"}
    with pytest.raises(InputError, match="dataset not found"):
        options.load_instances(parse(["--dataset", str(tmp_path / "none.jsonl")], without={"repos"}))


@pytest.mark.parametrize(("argv", "error"), [
    (["--stride", "0"], "--stride must be at least 1"),
    (["--shard", "3/2"], "--shard: need 0 <= I < N, got '3/2'"),
    (["--only", "nope"], "--only: no repository 'nope' in the dataset"),
])
def test_a_bench_says_a_bad_value_in_one_line_and_exits_2(argv: list[str], error: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ds = _dataset(tmp_path / "ds.jsonl", ["a/x"])
    out = tmp_path / "rows.jsonl"
    code = e2e_bench.main(["--dataset", str(ds), "--repos", str(tmp_path), "--tasks", "all", "-o", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and error in err, err
    assert not out.exists()
