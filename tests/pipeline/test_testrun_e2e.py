"""Crash context end to end: a patch that crashes the tests, and what the Coder sees next."""

from __future__ import annotations

import pytest

from eval.fixtures.repos import BUGGY_LINE, calc_script
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks
from tests.helpers.testrun_helpers import locals_section

pytestmark = pytest.mark.slow

# Clean for pyright (``values`` is untyped) and for the scripted runtime check, but a TypeError
# inside the repository's code as soon as the test calls it.
CRASHING_LINE = "    return sum([values]) / len(values)\n"


def test_type_error_in_the_tests_reaches_the_coders_next_prompt(calc, cfg_factory):
    mirrors, inst = calc
    cfg = cfg_factory("redo", **{"tests.locals_repr_chars": 40})
    script = calc_script(first_attempt_broken=False)
    script["CodeChange"].insert(0, {"edits": [{"path": "calc/ops.py", "search": BUGGY_LINE,
                                               "replace": CRASHING_LINE}],
                                    "explanation": "Sum the values."})
    model = ScriptedChatModel(script=script)
    summary = run_tasks([inst], cfg, run_id="crash", repos=mirrors, model_factory=lambda role: model,
                        progress=False)
    assert summary.finished == 1

    rec = read_record(cfg, "crash", inst.instance_id)
    first, second = rec["attempts"][:2]
    # Nothing static saw it: running the reproduction test does, and its TypeError, raised in the
    # repository's code, is a runtime finding (critic.repro_crashes).
    assert first["verdict"] == "Unsafe"
    [found] = [f for f in first["findings"] if f["source"] == "runtime"]
    assert found["rule"] == "TypeError" and (found["file"], found["symbol"]) == ("calc/ops.py", "mean")
    assert "the reproduction test, which should pass with the fix" in found["message"]
    assert first["score"]["kind"] == "tests"
    assert first["score"]["test_pass_rate"] == 0.0
    crash = first["crash_context"]
    assert "TypeError" in crash and "unsupported operand" in crash
    assert "calc/ops.py:11 in mean" in crash

    prompts = model.prompts_for("CodeChange")
    assert len(prompts) == 2
    assert "values = [1, 2, 3]" not in prompts[0]
    assert "TypeError" in prompts[1] and crash in prompts[1]
    assert "calc/ops.py:11 in mean" in prompts[1]

    assert second["score"]["test_pass_rate"] == 1.0
    assert second["crash_context"] == ""
    assert "values = [1, 2, 3]" in locals_section(crash)
