"""What a user trips over next: each found by running the README as written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fixgraph import records
from fixgraph.dataset import Task
from fixgraph.publish import DiffPublisher, Outcome
from fixgraph.records import RunStore, atomic_write

ROOT = Path(__file__).resolve().parents[2]


def outcome(tmp_path: Path, patch: str) -> Outcome:
    task = Task.model_validate({"instance_id": "fixture__calc-1", "repo": "fixture/calc",
                                "base_commit": "0" * 40, "problem_statement": "p"})
    return Outcome(task=task, patch=patch, explanation="", verdict="Safe", score={}, attempts=[],  # type: ignore[typeddict-item]
                   plan={}, files_read=[], usage={}, stop_reason="done")


def test_each_run_keeps_its_own_patch_and_predictions_holds_the_latest(tmp_path: Path) -> None:
    preds, runs = tmp_path / "predictions", tmp_path / "runs"
    first = DiffPublisher(RunStore("run-a", preds, runs, "m")).publish(outcome(tmp_path, "patch A\n"))
    second = DiffPublisher(RunStore("run-b", preds, runs, "m")).publish(outcome(tmp_path, "patch B\n"))
    iid = "fixture__calc-1"
    assert first["diff_path"] == str(runs / "run-a" / "patches" / f"{iid}.diff")
    assert Path(first["diff_path"]).read_text() == "patch A\n"  # not overwritten by run-b
    assert Path(second["diff_path"]).read_text() == "patch B\n"
    assert first["latest_diff_path"] == second["latest_diff_path"] == str(preds / f"{iid}.diff")
    assert (preds / f"{iid}.diff").read_text() == "patch B\n"


def test_the_dashboard_links_a_run_to_its_own_patch(tmp_path: Path) -> None:
    from eval.dashboard.page import _diff_file
    from eval.dashboard.rundata import load_run

    preds, runs = tmp_path / "predictions", tmp_path / "runs"
    for run_id, text in (("run-a", "patch A\n"), ("run-b", "patch B\n")):
        store = RunStore(run_id, preds, runs, "m")
        published = DiffPublisher(store).publish(outcome(tmp_path, text))
        store.write_record({"instance_id": "fixture__calc-1", "final": True, "config": "redo", **published})
    run_a = load_run(runs / "run-a")
    assert run_a is not None
    linked = _diff_file(run_a, run_a.records["fixture__calc-1"])
    assert linked is not None and linked.read_text() == "patch A\n"


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_get_the_umasks_mode(tmp_path: Path, umask: int, expected: int) -> None:
    target = tmp_path / "out" / "record.json"
    code = ("import sys; from pathlib import Path; from fixgraph.records import RunStore, atomic_write\n"
            "atomic_write(Path(sys.argv[1]), 'x')\n"
            "s = RunStore('r', Path(sys.argv[2]) / 'p', Path(sys.argv[2]) / 'runs', 'm')\n"
            "s.write_prediction('a__b-1', 'diff'); s.write_record({'instance_id': 'a__b-1'})")
    subprocess.run([sys.executable, "-c", code, str(target), str(tmp_path)], check=True, timeout=60,
                   preexec_fn=lambda: os.umask(umask), env={**os.environ, "PYTHONPATH": str(ROOT)})
    written = [target, tmp_path / "p" / "a__b-1.diff", tmp_path / "p" / "r.jsonl",
               tmp_path / "runs" / "r" / "patches" / "a__b-1.diff", tmp_path / "runs" / "r" / "records" / "a__b-1.json"]
    assert {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {
        str(p.relative_to(tmp_path)): oct(expected) for p in written}


def test_a_replaced_file_keeps_its_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "UMASK", 0o022)
    path = tmp_path / "secret.json"
    path.write_text("old")
    path.chmod(0o600)
    atomic_write(path, "new")
    assert (path.read_text(), stat.S_IMODE(path.stat().st_mode)) == ("new", 0o600)


def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fill_hub_cache(cache_dir: Path, dataset: str) -> None:
    """The hub client's cache as a load at its main branch leaves it."""
    from fixgraph.hub import repo_cache

    repo, commit = repo_cache(cache_dir, dataset), "c" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit / "data").mkdir(parents=True)
    (repo / "snapshots" / commit / "data" / "test-00000-of-00001.parquet").write_bytes(b"")


@pytest.mark.slow
@pytest.mark.parametrize("named", [[], ["--dataset", "verified"]], ids=["default", "verified"])
def test_offline_without_dataset_says_to_pass_dataset_within_seconds(tmp_path: Path, named: list[str]) -> None:
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "HF_"))}
    env.update(OPENAI_API_KEY="k", EVAL_MODE="true", FIXGRAPH_CACHE_DIR=str(tmp_path / "cache"),
               HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}")
    t0 = time.monotonic()
    if named:  # another set's cache is not this one's
        fill_hub_cache(tmp_path / "cache", "SWE-bench/SWE-bench_Lite")
    proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), "--tasks", "all", *named], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 10.0
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fixgraph: error: the dataset hub (http://127.0.0.1:")
    assert lines[0].endswith("is not cached; pass --dataset PATH to a SWE-bench JSONL")
    assert ("SWE-bench/SWE-bench_Verified" in lines[0]) == bool(named)


def test_offline_with_the_dataset_cached_reads_the_cache_without_retrying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fixgraph.hub import prepare_hub

    fill_hub_cache(tmp_path, "SWE-bench/SWE-bench_Lite")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    prepare_hub(tmp_path, "SWE-bench/SWE-bench_Lite")
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
