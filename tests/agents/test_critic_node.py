"""REDO §G in the graph: the Critic's errors reach the Coder with their location and code, and the
record says which of them the next attempt fixed."""

from __future__ import annotations

import pytest

from eval.fixtures.repos import calc_script
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks

pytestmark = pytest.mark.slow


def test_errors_go_to_the_coder_with_location_and_the_fix_is_recorded(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model = ScriptedChatModel(script=calc_script(first_attempt_broken=True))
    run_tasks([inst], cfg, run_id="node", repos=mirrors, model_factory=lambda role: model, progress=False)
    first, second = read_record(cfg, "node", inst.instance_id)["attempts"]

    [error] = [f for f in first["findings"] if f["source"] == "pyright"]
    assert error["rule"] == "reportUndefinedVariable" and error["file"] == "calc/ops.py"
    assert error["line"] > 0 and error["symbol"] and "total" in error["code"]

    retry_prompt = model.prompts_for("CodeChange")[1]
    assert f"calc/ops.py:{error['line']} in {error['symbol']}" in retry_prompt
    assert f"at: {error['code']}" in retry_prompt

    assert second["verdict"] == "Safe"
    fixed = second["fixed_from_previous"]
    assert any(k.startswith("pyright:reportUndefinedVariable:calc/ops.py:") and "total" in k for k in fixed)
