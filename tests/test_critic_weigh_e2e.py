"""No veto before evidence (issue 36), end to end: the graph on the calc fixture with a scripted model.

A correct patch that pyright flags (a variable it thinks possibly unbound) is delivered with a
passing score, the tests having run the line; a patch whose pyright finding is a real TypeError
is confirmed by the reproduction test that crashes there, and sent back to the Coder.
"""

from __future__ import annotations

from eval.fixtures.repos import BUGGY_LINE, FIXED_LINE, calc_script
from fixgraph.models.scripted import ScriptedChatModel
from graph import run_tasks
from tests.conftest import read_record

# Correct, yet pyright reports "n" as possibly unbound (mean() of an empty list is undefined anyway).
FALSE_POSITIVE = "    if values:\n        n = len(values)\n    return sum(values) / n\n"
# A call pyright rejects (too many arguments to len) that raises TypeError when it runs.
REAL_ERROR = "    return sum(values) / len(values, 1)\n"


def _script(first: str) -> dict:
    script = calc_script(first_attempt_broken=False)
    edit = {"path": "calc/ops.py", "search": BUGGY_LINE}
    script["CodeChange"] = [{"edits": [edit | {"replace": first}], "explanation": "Fix the mean."},
                            {"edits": [edit | {"replace": FIXED_LINE}], "explanation": "Drop the stray - 1."}]
    return script


def test_a_correct_patch_with_a_pyright_false_positive_is_delivered(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model = ScriptedChatModel(script=_script(FALSE_POSITIVE))
    run_tasks([inst], cfg, run_id="fp", repos=mirrors, model_factory=lambda role: model, progress=False)
    rec = read_record(cfg, "fp", inst.instance_id)
    [only] = rec["attempts"]
    assert only["verdict"] == "Safe"
    [suspicion] = [f for f in only["findings"] if f["source"] == "pyright"]
    assert suspicion["rule"] == "reportPossiblyUnbound" or "unbound" in suspicion["message"]
    assert suspicion["status"] == "contradicted", suspicion
    assert only["score"]["kind"] == "tests" and only["score"]["fix_score"] >= cfg.critic.fix_score_threshold
    assert "static suspicions: 1 contradicted" in only["score"]["note"]
    assert rec["published"]["attempt"] == 1
    assert len(model.prompts_for("CodeChange")) == 1


def test_a_real_runtime_error_found_statically_is_confirmed_and_sent_back(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model = ScriptedChatModel(script=_script(REAL_ERROR))
    run_tasks([inst], cfg, run_id="real", repos=mirrors, model_factory=lambda role: model, progress=False)
    rec = read_record(cfg, "real", inst.instance_id)
    first, second = rec["attempts"]
    assert first["verdict"] == "Unsafe"
    [error] = [f for f in first["findings"] if f["source"] == "pyright"]
    assert error["rule"] == "reportCallIssue" and error["status"] == "confirmed", error
    assert "TypeError" in error["evidence"]
    # The tests ran (no veto before them), and the Coder's second prompt carries the confirmed finding.
    assert first["score"]["kind"] == "tests" and first["score"]["test_pass_rate"] == 0.0
    retry = model.prompts_for("CodeChange")[1]
    assert "confirmed by the tests" in retry and "len(values, 1)" in retry
    assert second["verdict"] == "Safe" and rec["published"]["attempt"] == 2
