"""The whole graph on a real fixture repo, driven by a scripted chat model."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval.fixtures.repos import calc_script
from fixgraph.dataset import load_dataset_any
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks

pytestmark = pytest.mark.slow


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.slow
def test_static_error_goes_back_to_coder_and_second_patch_fixes_the_bug(calc, cfg_factory, tmp_path):
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model = ScriptedChatModel(script=calc_script(first_attempt_broken=True))
    summary = run_tasks([inst], cfg, run_id="e2e", repos=mirrors, model_factory=lambda role: model,
                        progress=False)
    assert (summary.finished, summary.patched, summary.failed) == (1, 1, 0)

    rec = read_record(cfg, "e2e", inst.instance_id)
    assert rec["plan"]["files"] == ["calc/ops.py"]
    assert rec["files_read"] == ["calc/ops.py"]
    first, second = rec["attempts"]
    # Attempt 1: pyright sees the undefined name `total`; the Critic rejects before running tests.
    assert first["verdict"] == "Unsafe"
    assert any(f["source"] == "pyright" and "total" in f["message"] for f in first["findings"])
    # The Coder's second prompt carried that finding.
    coder_prompts = model.prompts_for("CodeChange")
    assert len(coder_prompts) == 2 and "total" in coder_prompts[1] and "total" not in coder_prompts[0]
    # Attempt 2 passes static analysis and the instance's tests.
    assert second["verdict"] == "Safe"
    assert second["score"]["kind"] == "tests"
    assert second["score"]["test_pass_rate"] == 1.0
    assert second["score"]["no_regression"] == 1.0
    assert rec["published"]["attempt"] == 2
    assert rec["fix_score"]["fix_score"] >= 0.8
    assert rec["usage"]["calls"] >= 5 and rec["usage"]["input_tokens"] > 0
    assert set(rec["usage"]["by_node"]) >= {"planner", "explorer", "coder", "critic"}

    # The .diff applies to a fresh clone of the fixture and makes the failing test pass.
    diff = (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
    fresh = tmp_path / "fresh"
    assert _git(tmp_path, "clone", "-q", str(mirrors / "fixture+calc"), str(fresh)).returncode == 0
    (fresh / "pred.diff").write_text(diff)
    (fresh / "test.diff").write_text(inst.test_patch)
    assert _git(fresh, "apply", "--check", "pred.diff").returncode == 0
    assert _git(fresh, "apply", "pred.diff").returncode == 0
    assert _git(fresh, "apply", "test.diff").returncode == 0
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *inst.FAIL_TO_PASS],
                         cwd=fresh, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout

    # Official predictions JSONL: one line, the same patch.
    lines = (cfg.predictions_dir / "e2e.jsonl").read_text().splitlines()
    assert [json.loads(ln)["instance_id"] for ln in lines] == [inst.instance_id]
    assert json.loads(lines[0])["model_patch"] == diff


def test_second_run_skips_finished_tasks(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("baseline")
    model = ScriptedChatModel(script=calc_script(first_attempt_broken=False))
    first = run_tasks([inst], cfg, run_id="again", repos=mirrors, model_factory=lambda r: model, progress=False)
    assert first.finished == 1
    calls = len(model.seen)
    second = run_tasks([inst], cfg, run_id="again", repos=mirrors, model_factory=lambda r: model, progress=False)
    assert (second.skipped, second.finished) == (1, 0)
    assert len(model.seen) == calls


def test_baseline_makes_one_attempt_without_critic(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("baseline")
    model = ScriptedChatModel(script=calc_script(first_attempt_broken=True))
    run_tasks([inst], cfg, run_id="base", repos=mirrors, model_factory=lambda r: model, progress=False)
    rec = read_record(cfg, "base", inst.instance_id)
    assert rec["n_attempts"] == 1 and rec["attempts"][0]["verdict"] == "Skipped"
    assert "total(values)" in (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
    assert not model.prompts_for("RuntimeCheck")


def test_the_record_names_the_data_the_task_was_read_from(calc, cfg_factory, tmp_path):
    mirrors, inst = calc
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(inst.model_dump_json(exclude={"dataset"}) + "\n")
    [read] = load_dataset_any(rows, tmp_path)
    cfg = cfg_factory("baseline")
    model = ScriptedChatModel(script=calc_script(first_attempt_broken=False))
    run_tasks([read], cfg, run_id="data", repos=mirrors, model_factory=lambda r: model, progress=False)
    digest = hashlib.sha256(rows.read_bytes()).hexdigest()[:16]
    assert read_record(cfg, "data", inst.instance_id)["dataset"] == f"tasks.jsonl@sha256:{digest}"
    assert "dataset" not in read.task().model_dump()  # the graph is not told
