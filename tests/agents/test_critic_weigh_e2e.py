"""No veto before evidence, end to end: the graph on the calc fixture with a scripted model.

A correct patch that pyright flags (a variable it thinks possibly unbound) is delivered with a
passing score, the tests having run the line; a patch whose pyright finding is a real TypeError
is confirmed by the reproduction test that crashes there, and sent back to the Coder.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from eval.fixtures.repos import BUGGY_LINE, FIXED_LINE, calc_script
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks

pytestmark = pytest.mark.slow

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


def _run(calc, cfg_factory, first: str) -> tuple[Any, ScriptedChatModel, dict[str, Any]]:
    """The graph on the calc fixture, the Coder's first patch ``first``: (config, model, record)."""
    mirrors, inst = calc
    cfg = cfg_factory("redo")
    model = ScriptedChatModel(script=_script(first))
    run_tasks([inst], cfg, run_id="weigh", repos=mirrors, model_factory=lambda role: model, progress=False)
    return cfg, model, read_record(cfg, "weigh", inst.instance_id)


def test_a_correct_patch_with_a_pyright_false_positive_is_delivered(calc, cfg_factory):
    cfg, model, rec = _run(calc, cfg_factory, FALSE_POSITIVE)
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
    _, model, rec = _run(calc, cfg_factory, REAL_ERROR)
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


@pytest.mark.parametrize("first", [FIXED_LINE, FALSE_POSITIVE], ids=["clean", "suspected"])
def test_the_tests_run_ahead_of_the_static_phase_serve_only_when_nothing_is_suspected(calc, cfg_factory,
                                                                                      monkeypatch, first):
    from agents import critic

    calls: list[tuple[str, bool]] = []
    real = critic.outcomes.own_outcome

    def spy(*args: Any, **kwargs: Any):
        calls.append((threading.current_thread().name, bool(kwargs.get("trace") or args[-1])))
        return real(*args, **kwargs)

    monkeypatch.setattr(critic.outcomes, "own_outcome", spy)
    cfg, _, rec = _run(calc, cfg_factory, first)
    [only] = rec["attempts"]
    assert only["verdict"] == "Safe" and only["score"]["fix_score"] >= cfg.critic.fix_score_threshold
    assert calls[0] == ("critic-tests-ahead", False)
    if first == FIXED_LINE:
        assert calls == [("critic-tests-ahead", False)]  # the run ahead is the verdict's
    else:
        # The suspicion asks for its lines traced: a run of its own, after the one ahead ended.
        [(thread, traced)] = calls[1:]
        assert thread != "critic-tests-ahead" and traced
        [suspicion] = [f for f in only["findings"] if f["source"] == "pyright"]
        assert suspicion["status"] == "contradicted"


def test_no_run_ahead_when_off_or_for_a_patch_over_several_python_files(cfg_factory):
    from types import SimpleNamespace

    from agents.critic import runs_ahead

    one = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-a\n+b\n"
    two = one + one.replace("ops.py", "more.py")
    critic = cfg_factory("redo").critic

    def ahead(patch: str, **changed: object) -> bool:
        return runs_ahead(SimpleNamespace(cfg=SimpleNamespace(critic=critic.model_copy(update=changed))),  # type: ignore[arg-type]
                          patch)

    assert ahead(one) and not ahead(two)
    assert not ahead(one, tests_ahead=False) and not ahead(one, tests="oracle") and not ahead(one, static=False)
