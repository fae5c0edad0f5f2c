"""Planner and Explorer on a fixture repository, driven by a scripted chat model.

The two nodes run in a small LangGraph with the real rerun edge (``needs_replan``), so reruns,
caps and the report are what the full graph would see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from agents.context import TaskContext
from agents.explorer import explorer, needs_replan
from agents.planner import planner
from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from fixgraph.localize import count_tokens
from fixgraph.models.llm import LLM, Meter
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.state import TaskState
from tests.helpers.localize_repo import make_repo

# Ten modules; m0 imports m6..m9, so reading m0 offers those four as options.
MODULES = {f"pkg/m{i}.py": f'"""Module {i}."""\n\n\ndef func_{i}(x):\n    return x + {i}\n' for i in range(1, 10)}
MODULES["pkg/m0.py"] = ("from pkg import m6, m7, m8, m9\n\n\n"
                        "def func_0(x):\n    return m6.func_6(m7.func_7(m8.func_8(m9.func_9(x))))\n")


def make_cfg(**explorer: Any) -> RunConfig:
    return RunConfig.model_validate({"explorer": explorer})


def run(tmp_path: Path, script: dict[str, list[Any]], problem: str = "func_0 adds the wrong amount",
        **explorer_settings: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    cfg = make_cfg(**explorer_settings)
    wt = make_repo(tmp_path, extra=MODULES)
    model = ScriptedChatModel(script=script)
    ctx = TaskContext(
        cfg=cfg,
        task=Task(instance_id="fixture-1", repo="acme/pkg", base_commit=wt.base, problem_statement=problem),
        worktree=wt,
        llm=LLM(lambda role: model, Meter(cfg.budget, cfg.llm.prices)),
        publisher=None,  # type: ignore[arg-type]  # never reached: the graph ends after the Explorer
        cache_dir=tmp_path / "cache",
    )
    g = StateGraph(TaskState, context_schema=TaskContext)
    g.add_node("planner", planner)
    g.add_node("explorer", explorer)
    g.add_edge(START, "planner")
    g.add_edge("planner", "explorer")
    g.add_conditional_edges("explorer", lambda s: "planner" if needs_replan(s) else END, ["planner", END])
    state = g.compile().invoke({"instance_id": "fixture-1", "problem": problem}, context=ctx,
                               config={"recursion_limit": 30})
    return state, model


def plan(*files: str) -> dict[str, Any]:
    return {"files": list(files), "reasoning": "scripted"}


def step(next_files: list[str] | None = None, confidence: str = "high", learned: str = "found it",
         suspects: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"next_files": next_files or [], "confidence": confidence, "learned": learned,
            "suspects": suspects if suspects is not None else [{"file": "pkg/m0.py", "symbol": "func_0"}]}


@pytest.mark.slow
def test_missing_file_reruns_the_planner_with_nearest_paths(tmp_path: Path) -> None:
    state, model = run(tmp_path, {
        "Plan": [plan("pkg/session.py", "pkg/m0.py"), plan("pkg/sessions.py")],
        "ExploreStep": [step()],
    }, problem="merge_settings ignores None")
    assert state["reruns"] == [{"reason": "missing_file", "paths": ["pkg/session.py"],
                                "nearest": {"pkg/session.py": state["reruns"][0]["nearest"]["pkg/session.py"]}}]
    assert state["reruns"][0]["nearest"]["pkg/session.py"][0] == "pkg/sessions.py"
    second = model.prompts_for("Plan")[1]
    assert "pkg/session.py does not exist" in second and "pkg/sessions.py" in second
    assert state["files_read"] == ["pkg/sessions.py"]
    assert state["planner_runs"] == 2 and state["exploration"]["confidence"] == "high"


def test_low_confidence_reruns_the_planner_with_what_was_learned(tmp_path: Path) -> None:
    learned = "m3 only forwards its argument; the addition happens elsewhere"
    state, model = run(tmp_path, {
        "Plan": [plan("pkg/m3.py"), plan("pkg/m0.py")],
        "ExploreStep": [step(confidence="low", learned=learned, suspects=[]), step()],
    })
    assert [r["reason"] for r in state["reruns"]] == ["low_confidence"]
    assert state["reruns"][0]["learned"] == learned
    assert learned in model.prompts_for("Plan")[1]
    assert state["files_read"] == ["pkg/m0.py"]
    assert state["exploration"]["confidence"] == "high"
    # The suspect's lines come from the index when the LLM leaves them out.
    assert state["exploration"]["suspects"][0]["start_line"] == 4
    # The fixture has one commit: no history before the base, and the record says so.
    assert state["exploration"]["history"] == "history: absent (no commits before the base); ranked without it"
    # The issue has no code: nothing ran, and the record says why.
    assert state["exploration"]["execution"] == "execution: not run (the issue has no Python code to run)"


def test_reruns_are_bounded_by_config(tmp_path: Path) -> None:
    state, model = run(tmp_path, {
        # A callable reply repeats: the Planner always names a wrong path, the Explorer is always unsure.
        "Plan": [lambda msgs: plan("pkg/nope.py")],
        "ExploreStep": [lambda msgs: step(confidence="low", suspects=[])],
    }, max_planner_reruns=1)
    assert [r["reason"] for r in state["reruns"]] == ["missing_file"]
    assert len(model.prompts_for("Plan")) == 2
    # Reruns spent, nothing named exists: the Explorer falls back on the ranking and reports.
    assert state["files_read"] and state["files_read"][0] == "pkg/m0.py"
    assert state["exploration"]["confidence"] == "low"


def test_eight_file_cap_before_three_iterations(tmp_path: Path) -> None:
    first = [f"pkg/m{i}.py" for i in range(6)]
    state, model = run(tmp_path, {
        "Plan": [plan(*first)],
        "ExploreStep": [step(next_files=["pkg/m6.py", "pkg/m7.py", "pkg/m8.py", "pkg/m9.py"]), step()],
    })
    assert state["files_read"] == first + ["pkg/m6.py", "pkg/m7.py"]
    assert state["exploration"]["iterations"] == 2
    prompts = model.prompts_for("ExploreStep")
    assert len(prompts) == 2
    assert "imported by pkg/m0.py" in prompts[0]
    assert "Nothing more can be read" in prompts[1]


@pytest.mark.slow
def test_three_iteration_cap_before_eight_files(tmp_path: Path) -> None:
    state, model = run(tmp_path, {
        "Plan": [plan("pkg/m0.py")],
        "ExploreStep": [step(next_files=["pkg/m6.py"]), step(next_files=["pkg/m7.py"]),
                        step(next_files=["pkg/m8.py"])],
    })
    assert state["files_read"] == ["pkg/m0.py", "pkg/m6.py", "pkg/m7.py"]
    assert state["exploration"]["iterations"] == 3
    prompts = model.prompts_for("ExploreStep")
    assert len(prompts) == 3
    assert "iteration 3 of 3" in prompts[2] and "Nothing more can be read" in prompts[2]


def test_first_iteration_reads_every_planned_file_and_ignores_unoffered_choices(tmp_path: Path) -> None:
    state, model = run(tmp_path, {
        "Plan": [plan("pkg/m1.py", "./pkg/m2.py", "pkg/m1.py")],
        "ExploreStep": [step(next_files=["pkg/big.py", "/etc/passwd"])],  # neither is an option
    })
    assert state["files_read"] == ["pkg/m1.py", "pkg/m2.py"]
    assert state["exploration"]["iterations"] == 1
    first = model.prompts_for("ExploreStep")[0]
    assert "## pkg/m1.py" in first and "## pkg/m2.py" in first


@pytest.mark.slow
@pytest.mark.parametrize("budget", [1500, 4000])
def test_explorer_prompt_stays_within_token_budget(tmp_path: Path, budget: int) -> None:
    state, model = run(tmp_path, {
        "Plan": [plan("pkg/big.py", "pkg/sessions.py", "pkg/m0.py")],
        "ExploreStep": [step(suspects=[{"file": "pkg/big.py", "symbol": "compute_total"}])],
    }, problem="Ledger.compute_total does not skip None entries", token_budget=budget, max_iterations=1)
    prompt = model.prompts_for("ExploreStep")[0]
    assert count_tokens(prompt) <= budget
    assert "skeleton" in prompt
    if budget >= 4000:
        assert "BUG: None is not skipped" in prompt  # the symbol is shown in full


def test_symlink_out_of_the_repo_is_never_read(tmp_path: Path) -> None:
    from tests.helpers.localize_repo import SECRET

    state, model = run(tmp_path, {
        "Plan": [plan("leak.txt", "data/logo.bin"), plan("data/logo.bin", "pkg/sessions.py")],
        "ExploreStep": [step()],
    }, problem=f"merge_settings fails when {SECRET} is set")
    # A link is not a file the Planner may name: it is reported missing, like a wrong path.
    assert state["reruns"][0]["reason"] == "missing_file" and state["reruns"][0]["paths"] == ["leak.txt"]
    explored = model.prompts_for("ExploreStep")[0]
    assert "not shown (binary, huge or unreadable)" in explored
    assert f"{SECRET} merge_settings" not in "\n".join(model.prompts_for("Plan") + model.prompts_for("ExploreStep"))
