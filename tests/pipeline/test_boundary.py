"""The information boundary: what a dataset row gives the pipeline, and the oracle-tests ablation."""

from __future__ import annotations

import json

import pytest

from eval.fixtures.repos import calc_script
from fixgraph.dataset import EvaluationData, Instance, Task
from fixgraph.models.scripted import ScriptedChatModel
from pipeline.tasks import model_name, split
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks

ROW = {"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc", "problem_statement": "it breaks",
       "hints_text": "look at x.py", "patch": "P", "test_patch": "T", "FAIL_TO_PASS": '["t1"]',
       "PASS_TO_PASS": '["t2"]', "version": "1.0"}


def test_a_task_has_no_field_for_the_evaluation_data() -> None:
    task = Instance.model_validate(ROW).task()
    for name in ("patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"):
        assert not hasattr(task, name)
    assert "patch" not in task.model_dump() and task.issue == "it breaks"
    with pytest.raises(ValueError):
        Task.model_validate({**ROW})  # a dataset row is not a task: the extra fields are refused


def test_hints_only_when_the_config_allows_them(cfg_factory) -> None:
    inst = Instance.model_validate(ROW)
    task, evaluation = split(inst, cfg_factory("redo"))
    assert task.hints_text == "" and evaluation is None
    task, _ = split(inst, cfg_factory("redo", hints_text=True))
    assert "look at x.py" in task.issue


def test_only_the_oracle_ablation_gets_the_evaluation_data(cfg_factory) -> None:
    inst = Instance.model_validate(ROW)
    cfg = cfg_factory("oracle-tests")
    task, evaluation = split(inst, cfg)
    assert evaluation == EvaluationData(patch="P", test_patch="T", FAIL_TO_PASS=["t1"], PASS_TO_PASS=["t2"])
    assert cfg.label == "oracle-tests" and "oracle-tests" in model_name(cfg)
    renamed = cfg_factory("redo", **{"critic.tests": "oracle"})
    assert renamed.label == "redo-oracle-tests" and "oracle-tests" in model_name(renamed)


@pytest.mark.slow
def test_the_oracle_ablation_runs_the_hidden_tests_and_says_so(calc, cfg_factory) -> None:
    mirrors, inst = calc
    cfg = cfg_factory("oracle-tests")
    model = ScriptedChatModel(script=calc_script(first_attempt="wrong"))
    run_tasks([inst], cfg, run_id=cfg.label, repos=mirrors, model_factory=lambda role: model, progress=False)
    rec = read_record(cfg, "oracle-tests", inst.instance_id)
    assert rec["tests_source"] == "oracle" and rec["config"] == "oracle-tests"
    assert "oracle-tests" in rec["model_name_or_path"]
    first = rec["attempts"][0]["score"]
    assert first["tests_source"] == "oracle" and set(first["fail_to_pass"]) == set(inst.FAIL_TO_PASS)
    assert rec["repro"] == {"status": "off"} and not model.prompts_for("ReproTestDraft")
    line = json.loads((cfg.predictions_dir / "oracle-tests.jsonl").read_text().splitlines()[0])
    assert "oracle-tests" in line["model_name_or_path"]
