"""coder.candidates = 3 end to end: three patches per round, each judged, the best delivered by
the selection rule, every candidate in the record, and the budget kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.repos import BROKEN_LINE, BUGGY_LINE, FIXED_LINE, WRONG_LINE, calc_script, make_calc_repo
from fixgraph.dataset import Instance
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks

pytestmark = pytest.mark.slow

PRICE = 1000.0  # dollars per million input tokens, so that the scripted calls cost something


def _script() -> dict[str, list[Any]]:
    script = calc_script(False)
    edit = {"path": "calc/ops.py", "search": BUGGY_LINE}
    # Broken first (a static finding the tests confirm), wrong second (the reproduction test fails), right last.
    script["CodeChange"] = [{"edits": [edit | {"replace": line}], "explanation": why}
                            for line, why in ((BROKEN_LINE, "Use total()."), (WRONG_LINE, "Subtract less."),
                                              (FIXED_LINE, "Drop the stray - 1."))]
    return script


def _run(tmp_path: Path, cfg_factory, run_id: str, **overrides: Any):
    mirrors = tmp_path / "mirrors"
    if not (tmp_path / "instance.json").exists():
        (tmp_path / "instance.json").write_text(json.dumps(make_calc_repo(mirrors)))
    inst = Instance.model_validate_json((tmp_path / "instance.json").read_text())
    cfg = cfg_factory("redo", **{"coder.candidates": 3, "llm.prices": {"scripted": {"input": PRICE}}} | overrides)
    model = ScriptedChatModel(script=_script())
    summary = run_tasks([inst], cfg, run_id=run_id, repos=mirrors, model_factory=lambda role: model, progress=False)
    return cfg, inst, model, summary, read_record(cfg, run_id, inst.instance_id)


def test_three_candidates_are_judged_and_the_best_is_delivered_within_budget(tmp_path, cfg_factory):
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, "three", **{"budget.task_dollars": 50.0})
    assert (summary.finished, summary.patched) == (1, 1)
    attempts = rec["attempts"]
    # One round of three, each judged by the Critic.
    assert [a["number"] for a in attempts] == [1, 2, 3] and {a["round"] for a in attempts} == {1}
    assert [a["verdict"] for a in attempts] == ["Unsafe", "Safe", "Safe"]
    # The broken one's pyright finding is weighed against the tests: they confirm it.
    assert attempts[0]["score"]["fix_score"] < cfg.critic.fix_score_threshold
    assert any(f["source"] == "pyright" and f.get("status") == "confirmed" for f in attempts[0]["findings"])
    assert attempts[1]["score"]["test_pass_rate"] == 0.0 and attempts[2]["score"]["test_pass_rate"] == 1.0
    assert attempts[2]["score"]["fix_score"] >= cfg.critic.fix_score_threshold
    # How each was sampled is recorded: the usual prompt first, then the sampling temperature.
    assert [a["sample"]["temperature"] for a in attempts] == [cfg.llm.temperature, 0.8, 0.8]
    assert all(a["sample"]["file_order"] == ["calc/ops.py"] for a in attempts)
    # The best is delivered, by the rule, and the ranking of all three is in the record.
    assert rec["published"]["attempt"] == 3
    assert [r["name"] for r in rec["published"]["selection"]] == ["3", "2", "1"]
    diff = (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
    assert FIXED_LINE.strip() in diff and "- 0.5" not in diff
    # No second round: the best of the first passed the threshold.
    assert len(model.prompts_for("CodeChange")) == 3
    assert rec["usage"]["by_node"]["coder"]["calls"] == 3
    assert rec["usage"]["dollars"] <= cfg.budget.task_dollars


def test_the_budget_stops_the_samples_before_it_is_overrun(tmp_path, cfg_factory):
    # Measure a full run, then give a task just enough for the first Coder sample's worst case.
    _, _, model, _, full = _run(tmp_path, cfg_factory, "measure", **{"budget.task_dollars": 50.0})
    by_node = full["usage"]["by_node"]
    before_coder = full["usage"]["dollars"] - by_node["coder"]["dollars"] - by_node.get("critic", {}).get("dollars", 0)
    one_call = by_node["coder"]["dollars"] / by_node["coder"]["calls"]
    # The Meter's bound on a call: its prompt at four characters a token (the scripted model has no output cap).
    prompt_chars = len(model.prompts_for("CodeChange")[0]) - 1
    worst = prompt_chars / 4 * PRICE / 1_000_000
    budget = round(before_coder + worst + one_call / 2, 6)
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, "tight", **{"budget.task_dollars": budget})
    assert rec["stop_reason"].startswith("budget: task dollar budget nearly spent")
    assert len(model.prompts_for("CodeChange")) == 1
    assert rec["usage"]["dollars"] <= budget
    # The one sample the budget allowed is kept, recorded, and delivered (unjudged: no budget left).
    assert [(a["number"], a["verdict"]) for a in rec["attempts"]] == [(1, "Unchecked")]
    assert rec["published"]["attempt"] == 1 and summary.patched == 1
