"""The real ChatOpenAI client over HTTP against a loopback OpenAI-compatible server."""

from __future__ import annotations

import pytest

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fixtures.repos import calc_script
from fixgraph.config import Price
from tests.conftest import TEST_KEY, read_record
from tests.helpers.run_graph import run_tasks

pytestmark = pytest.mark.slow


def test_chatopenai_on_the_wire_structured_output_auth_and_usage(calc, cfg_factory):
    mirrors, inst = calc
    with FakeLLMServer(ScriptResponder(calc_script(first_attempt_broken=True)), usage=(1000, 200)) as srv:
        cfg = cfg_factory("redo", **{"llm.base_url": srv.base_url,
                                     "llm.models": {"planner": "m-small", "explorer": "m-small",
                                                    "coder": "m-big", "critic": "m-small"},
                                     "llm.prices": {"m-small": Price(input=1.0, output=2.0).model_dump(),
                                                    "m-big": Price(input=10.0, output=20.0).model_dump()}})
        summary = run_tasks([inst], cfg, run_id="wire", repos=mirrors, progress=False)
        requests = list(srv.requests)
    assert summary.patched == 1
    rec = read_record(cfg, "wire", inst.instance_id)
    assert [a["verdict"] for a in rec["attempts"]] == ["Unsafe", "Safe"]
    # Auth header and base_url: every request reached this server with the configured key.
    assert requests and all(r["headers"].get("authorization") == f"Bearer {TEST_KEY}" for r in requests)
    assert all(r["path"] == "/v1/chat/completions" for r in requests)
    # Structured output went over the wire as a forced tool call with the pydantic schema.
    names = [r["body"]["tools"][0]["function"]["name"] for r in requests]
    assert names[:2] == ["Plan", "ExploreStep"] and names.count("CodeChange") == 2
    assert {r["body"]["model"] for r in requests if r["body"]["tools"][0]["function"]["name"] == "CodeChange"} == {"m-big"}
    # Token accounting from the server's usage blocks, cost from the price table.
    calls = len(requests)
    usage = rec["usage"]
    assert usage["calls"] == calls
    assert usage["input_tokens"] == 1000 * calls and usage["output_tokens"] == 200 * calls
    big = names.count("CodeChange") + names.count("ReproTestDraft")  # both on the coder's model
    expected = (big * (1000 * 10 + 200 * 20) + (calls - big) * (1000 * 1 + 200 * 2)) / 1e6
    assert abs(usage["dollars"] - expected) < 1e-9
    assert usage["by_node"]["coder"]["calls"] == names.count("CodeChange")
    assert usage["by_node"]["reproducer"]["calls"] == names.count("ReproTestDraft") == 1
    # The key never lands in the record or the prediction.
    text = (cfg.runs_dir / "wire" / "records" / f"{inst.instance_id}.json").read_text()
    assert TEST_KEY not in text


def test_a_call_whose_worst_case_overruns_the_budget_is_never_made(calc, cfg_factory):
    mirrors, inst = calc
    with FakeLLMServer(ScriptResponder(calc_script(False)), usage=(1000, 200)) as srv:
        cfg = cfg_factory("baseline", **{"llm.base_url": srv.base_url, "budget.task_dollars": 0.05,
                                         "llm.max_output_tokens": 4096,
                                         "llm.models": {"planner": "m-small", "explorer": "m-small",
                                                        "coder": "m-big", "critic": "m-small"},
                                         "llm.prices": {"m-small": {"input": 1.0, "output": 2.0},
                                                        "m-big": {"input": 10.0, "output": 20.0}}})
        run_tasks([inst], cfg, run_id="cap", repos=mirrors, progress=False)
        names = [r["body"]["tools"][0]["function"]["name"] for r in srv.requests]
        # Each node's cap, sent in both fields (most OpenAI-compatible servers read max_tokens).
        caps = {"Plan": cfg.llm.output_cap("planner"), "ExploreStep": cfg.llm.output_cap("explorer")}
        assert [(r["body"]["max_tokens"], r["body"]["max_completion_tokens"]) for r in srv.requests] == [
            (caps[n], caps[n]) for n in names]
        assert cfg.llm.output_cap("coder") == 4096
    # The Coder's reply could cost 4096 * $20/M = $0.08 alone: more than the $0.05 cap allows.
    assert names == ["Plan", "ExploreStep"]
    rec = read_record(cfg, "cap", inst.instance_id)
    assert "next call may cost up to" in rec["stop_reason"]
    assert rec["usage"]["dollars"] <= 0.05
