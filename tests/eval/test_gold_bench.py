"""eval.gold_bench on a fixture dataset (local backend), and its bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import gold_bench
from eval.fixtures.repos import make_calc_repo, write_dataset
from fixgraph.dataset import load_jsonl


@pytest.mark.slow
def test_gold_and_empty_patch_on_a_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors = tmp_path / "mirrors"
    dataset = write_dataset(tmp_path / "data.jsonl", [make_calc_repo(mirrors)])
    out = tmp_path / "bench.jsonl"
    args = ["--dataset", str(dataset), "--repos", str(mirrors), "--backend", "local",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--timeout", "60"]
    assert gold_bench.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "runnable=1.000 gold_fix_score=1.000"
    row = next(ln for ln in lines if ln.startswith("fixture/calc"))
    assert row.split()[1:6] == ["1", "1", "1.000", "1.000", "0.000"]
    rec = json.loads(out.read_text())
    assert rec["gold_test_pass_rate"] == 1.0 and rec["empty_test_pass_rate"] == 0.0
    # a rerun resumes: nothing runs again, same headline
    assert gold_bench.main(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == lines[-1]
    assert len(out.read_text().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["--dataset", "nope.jsonl", "--repos", "."], "error: dataset not found: nope.jsonl"),
    (["--dataset", "x.jsonl", "--repos", "no/such/dir"], "error: --repos: not a directory: no/such/dir"),
    (["--dataset", "x.jsonl", "--repos", ".", "--limit", "0"], "error: --limit must be at least 1"),
])
def test_bad_input_is_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert gold_bench.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [message]


def test_no_instance_with_a_mirror(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "data.jsonl", [make_calc_repo(tmp_path / "elsewhere")])
    (tmp_path / "empty").mkdir()
    assert gold_bench.main(["--dataset", str(dataset), "--repos", str(tmp_path / "empty")]) == 2
    assert "has a mirror under" in capsys.readouterr().err


@pytest.mark.slow
def test_a_base_commit_missing_from_the_mirror_is_one_clear_record(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    mirrors = tmp_path / "mirrors"
    good = make_calc_repo(mirrors)
    gone = {**good, "instance_id": "fixture__calc-2", "base_commit": "0123456789abcdef" * 2 + "01234567"}
    dataset = write_dataset(tmp_path / "data.jsonl", [good, gone])
    out = tmp_path / "bench.jsonl"
    args = ["--dataset", str(dataset), "--repos", str(mirrors), "--backend", "local", "--stride", "2",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--timeout", "60"]
    assert gold_bench.main(args) == 0  # --stride 2: the first of the two only
    assert [json.loads(ln)["instance_id"] for ln in out.read_text().splitlines()] == ["fixture__calc-1"]
    assert gold_bench.main([*args[:-6], "--tasks", "fixture__calc-2", *args[-6:]]) == 0
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(rows) == 2 and rows[1]["runnable"] is False
    assert "0123456789ab" in rows[1]["reason"]
    assert "fixture/calc: 1 x" in capsys.readouterr().out


@pytest.mark.slow
def test_a_version_without_install_specs_runs_in_the_env_inferred_from_its_commit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Verified-style row of a repository swebench knows, at a version it has no specs for: its env
    is inferred from the repository's own files at the row's commit, and the gold patch is graded
    with tests."""
    mirrors = tmp_path / "mirrors"
    row = {**make_calc_repo(mirrors, owner="sphinx-doc", name="sphinx"), "version": "0.1"}
    dataset = write_dataset(tmp_path / "data.jsonl", [row])
    out = tmp_path / "bench.jsonl"
    assert gold_bench.main(["--dataset", str(dataset), "--repos", str(mirrors), "--backend", "venv",
                            "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 0
    [rec] = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rec["runnable"] is True, rec
    assert [p.name.split("__")[1][:9] for p in (tmp_path / "cache" / "envs").iterdir() if p.is_dir()] == ["inferred-"]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("runnable=1.000")


def test_two_runs_on_one_cache_never_share_an_instance_s_worktree(tmp_path: Path) -> None:
    from fixgraph.repo.workspace import WorkspaceError

    keys: list[str] = []

    class Cache:
        def worktree(self, repo: str, commit: str, key: str) -> None:
            keys.append(key)
            raise WorkspaceError("stop here")

    mirrors = tmp_path / "mirrors"
    [inst] = load_jsonl(write_dataset(tmp_path / "data.jsonl", [make_calc_repo(mirrors)]))
    for run in ("lite_gold", "verified_gold"):
        assert gold_bench.run_one(inst, Cache(), None, run)["runnable"] is False  # type: ignore[arg-type]
    assert keys == [f"goldbench-lite_gold-{inst.instance_id}", f"goldbench-verified_gold-{inst.instance_id}"]


@pytest.mark.slow
def test_a_worktree_that_cannot_be_reset_keeps_the_gold_row_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Another process removing the worktree between the gold and the empty run: the row is written
    with the gold result and why the empty patch did not run, and the next instance runs."""
    import git

    from fixgraph.repo.workspace import Worktree

    reset = Worktree.reset

    def gone(self: Worktree) -> None:  # checkouts reset a clean worktree; only the patched one is gone
        if self.repo.is_dirty():
            raise git.GitCommandError(["git", "reset"], 128, b"fatal: not a git repository: .git/worktrees/x")
        reset(self)

    monkeypatch.setattr(Worktree, "reset", gone)
    mirrors = tmp_path / "mirrors"
    first = make_calc_repo(mirrors)
    dataset = write_dataset(tmp_path / "data.jsonl", [first, {**first, "instance_id": "fixture__calc-2"}])
    out = tmp_path / "bench.jsonl"
    assert gold_bench.main(["--dataset", str(dataset), "--repos", str(mirrors), "--backend", "local",
                            "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--timeout", "60"]) == 0
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["instance_id"] for r in rows] == ["fixture__calc-1", "fixture__calc-2"]
    for r in rows:
        assert r["runnable"] is True and r["gold_test_pass_rate"] == 1.0 and r["empty_test_pass_rate"] is None
        assert r["empty_reason"] == "empty patch not run: cannot reset the worktree: fatal: not a git repository: .git/worktrees/x"
    assert "the empty patch's do not: empty patch not run" in capsys.readouterr().out
