"""The LLM runtime-error check, driven by a scripted chat model on the fixture repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.critic_repo import edit, make_repo
from fixgraph.config import Budget, CriticSettings, Price
from fixgraph.dataset import Task
from fixgraph.models.llm import LLM, Meter
from fixgraph.models.scripted import ScriptedChatModel, tool_reply
from fixgraph.repo.workspace import Worktree
from scoring.runtime.llm_check import original_functions, runtime_check
from scoring.static.differential import analyze_patch

# The patch reads an attribute Circle does not have, through an untyped parameter: pyright cannot
# know what ``c`` is, so only a reader of the repository sees the AttributeError.
OLD = 'return "circle of radius %s" % c.r'
NEW = 'return "circle of radius %s" % c.radius'
UNSAFE = {"verdict": "Unsafe", "errors": [{"type": "AttributeError", "location": "pkg/shapes.py:20",
                                           "reasoning": "describe() receives a Circle, which has r, not radius."}]}


@pytest.fixture(scope="module")
def wt(tmp_path_factory: pytest.TempPathFactory) -> Worktree:
    return make_repo(tmp_path_factory.mktemp("llm") / "repo")


def instance(wt: Worktree) -> Task:
    return Task(instance_id="demo__shapes-1", repo="demo/shapes", base_commit=wt.base,
                    problem_statement="describe() should mention the circle's radius.")


def llm_with(*replies: Any, reasks: int = 1) -> tuple[LLM, ScriptedChatModel]:
    model = ScriptedChatModel(script={"RuntimeCheck": list(replies)}, model_name="gpt-4o-mini")
    meter = Meter(Budget(), {"gpt-4o-mini": Price(input=0.15, output=0.6)})
    return LLM(lambda role: model, meter, reasks), model


@pytest.mark.slow
def test_llm_finds_an_attribute_error_static_analysis_cannot_see(wt: Worktree, tmp_path: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", OLD, NEW)
    static = analyze_patch(wt, patch, settings=CriticSettings(), cache_dir=tmp_path)
    assert static.status == "ok" and static.new == []

    llm, model = llm_with(tool_reply("RuntimeCheck", UNSAFE))
    check, usage = runtime_check(llm, instance(wt), wt, patch)
    assert check is not None and check.verdict == "Unsafe"
    assert [(e.type, e.location) for e in check.errors] == [("AttributeError", "pkg/shapes.py:20")]
    assert usage["calls"] == 1 and usage["by_node"]["critic"]["input_tokens"] == 100
    assert usage["dollars"] > 0

    [prompt] = model.prompts_for("RuntimeCheck")
    assert "describe() should mention the circle's radius." in prompt  # the problem statement
    assert "## pkg/shapes.py:19 describe" in prompt and OLD in prompt  # the original function
    assert "+    " + NEW in prompt  # the patch
    assert "Prune errors" in prompt


def test_safe_verdict(wt: Worktree) -> None:
    patch = edit(wt, "pkg/shapes.py", OLD, 'return "circle of radius %s" % (c.r,)')
    llm, _ = llm_with({"verdict": "Safe", "errors": []})
    check, _ = runtime_check(llm, instance(wt), wt, patch)
    assert check is not None and check.verdict == "Safe" and check.errors == []


def test_answer_without_a_verdict_is_no_verdict_not_safe(wt: Worktree) -> None:
    patch = edit(wt, "pkg/shapes.py", OLD, NEW)
    # Neither the answer nor the re-ask carries a verdict.
    llm, model = llm_with({"errors": []}, {"errors": [], "verdict": "Probably fine"})
    check, usage = runtime_check(llm, instance(wt), wt, patch)
    assert check is None
    assert usage["calls"] == 2  # the re-ask was paid for and is accounted
    assert len(model.prompts_for("RuntimeCheck")) == 2


def test_several_calls_take_the_majority_and_ties_are_unsafe(wt: Worktree) -> None:
    patch = edit(wt, "pkg/shapes.py", OLD, NEW)
    safe = {"verdict": "Safe", "errors": []}
    llm, _ = llm_with(safe, UNSAFE, safe)
    check, usage = runtime_check(llm, instance(wt), wt, patch, calls=3)
    assert check is not None and check.verdict == "Safe" and usage["calls"] == 3
    llm, _ = llm_with(safe, UNSAFE)
    check, _ = runtime_check(llm, instance(wt), wt, patch, calls=2)
    assert check is not None and check.verdict == "Unsafe" and check.errors[0].type == "AttributeError"


def test_original_functions_are_the_ones_the_patch_touches(wt: Worktree) -> None:
    patch = edit(wt, "pkg/shapes.py", "return Circle(self.r * k)", "return Circle(self.r * k * 1)")
    funcs = original_functions(wt, patch)
    assert [(f.file, f.name, f.start) for f in funcs] == [("pkg/shapes.py", "Circle.scaled", 11)]
    assert funcs[0].code.startswith("    def scaled(self, k):")
    # A new file has no original code.
    assert original_functions(wt, edit(wt, "pkg/new.py", "", "X = 1\n")) == []
