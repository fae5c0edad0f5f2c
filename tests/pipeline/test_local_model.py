"""A small local model behind a llama.cpp-like server (eval/fakes/local_llm_server.py): output caps
that reach it, timeouts that do not pile up, cut and empty replies named, over the wire."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fakes.local_llm_server import LocalModelServer
from eval.fixtures.repos import calc_script
from fixgraph.models.llm import TIMEOUT_KNOB, CallEvent
from pipeline.screen import Activity
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks
from tests.helpers.transport import transport_blips


def _run(calc: Any, cfg_factory: Any, srv: FakeLLMServer, overrides: dict[str, Any] | None = None,
         run_id: str = "l", event_lines: bool = False) -> tuple[Any, dict, Any]:
    mirrors, inst = calc
    cfg = cfg_factory("baseline", **{"llm.base_url": srv.base_url, **(overrides or {})})
    summary = run_tasks([inst], cfg, run_id=run_id, repos=mirrors, progress=False, event_lines=event_lines)
    return summary, read_record(cfg, run_id, inst.instance_id), cfg


def _bodies(srv: FakeLLMServer, tool: str) -> list[dict[str, Any]]:
    return [r["body"] for r in srv.requests if r["body"] and r["body"]["tools"][0]["function"]["name"] == tool]


@pytest.mark.slow
def test_tool_calls_streamed_with_their_name_in_every_chunk_are_read_as_one_call(calc, cfg_factory):
    # llama-cpp-python's server repeats the name in each chunk; LangChain alone joins them
    # ("PlanPlanPlan") and every reply read as calling no known tool (seen on the real server).
    with LocalModelServer(ScriptResponder(calc_script(False)), repeat_names=True) as srv:
        summary, rec, _ = _run(calc, cfg_factory, srv, {"llm.stream": True})
    assert summary.patched == 1 and rec["plan"]["files"] == ["calc/ops.py"]
    assert not rec["usage"].get("invalid") and not rec["usage"].get("reasks")


@pytest.mark.slow
def test_a_looping_model_is_stopped_by_the_schemas_bounds(calc, cfg_factory):
    # The model repeats the Planner's first file forever; the schema's maxItems (as a grammar) ends it.
    with LocalModelServer(ScriptResponder(calc_script(False)), loop_tools=("Plan",)) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv)
        plan = [g for g in srv.generations if g["tool"] == "Plan"]
        body = _bodies(srv, "Plan")[0]
    assert summary.patched == 1 and rec["plan"]["files"] == ["calc/ops.py"]
    assert len(plan) == 1 and plan[0]["ended"] == "done" and plan[0]["tokens"] < 30
    schema = body["tools"][0]["function"]["parameters"]["properties"]
    assert schema["files"]["maxItems"] == 20 and schema["files"]["items"]["maxLength"] == 300
    assert schema["reasoning"]["maxLength"] > 0
    # Every node's schema on the way (Plan, ExploreStep, ReproTestDraft, CodeChange, ...) is one
    # llama.cpp's grammar parser accepts; one it refused would leave that reply with no grammar.
    assert srv.refused_grammars == 0 and {g["tool"] for g in srv.generations} >= {"Plan", "CodeChange"}


@pytest.mark.slow
def test_a_schema_with_a_bound_over_the_grammar_parsers_limit_gets_no_grammar(calc, cfg_factory):
    # What the real server did before the bounds were fitted to it: a long maxLength anywhere made
    # llama.cpp refuse the whole grammar, and the looping Planner ran on to max_tokens.
    with LocalModelServer(ScriptResponder(calc_script(False)), loop_tools=("Plan",), grammar_max_chars=200) as srv:
        _run(calc, cfg_factory, srv, {"llm.node_output_tokens": {"planner": 40}})
        plan = [g for g in srv.generations if g["tool"] == "Plan"]
    assert srv.refused_grammars > 0 and plan[0]["ended"] == "length"


def test_long_text_bounds_are_validated_but_kept_out_of_the_schema():
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ValidationError

    from fixgraph import state

    replies = (state.Plan, state.ExploreStep, state.CodeChange, state.RuntimeCheck, state.ReproTestDraft,
               state.PatchJudgment)
    for reply in replies:
        found = re.findall(r'"maxLength": (\d+)', json.dumps(convert_to_openai_tool(reply)["function"]["parameters"]))
        assert found and max(map(int, found)) <= state.GRAMMAR_MAX_CHARS, reply.__name__
    with pytest.raises(ValidationError):
        state.Edit(path="a.py", search="x" * (state.CODE_CHARS + 1), replace="")


@pytest.mark.slow
def test_a_looping_model_is_stopped_by_max_tokens_when_no_grammar_holds_it(calc, cfg_factory):
    # No grammar, and the server reads max_tokens only (not max_completion_tokens): the node's cap
    # reaches it because fixgraph sends both; the cut reply is named, re-asked once, then recorded.
    with LocalModelServer(ScriptResponder(calc_script(False)), loop_tools=("Plan",), grammar=False) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv, {"llm.node_output_tokens": {"planner": 40}})
        plan = [g for g in srv.generations if g["tool"] == "Plan"]
        bodies = _bodies(srv, "Plan")
    assert [b["max_tokens"] for b in bodies] == [40, 40] and [b["max_completion_tokens"] for b in bodies] == [40, 40]
    assert [(g["ended"], g["tokens"]) for g in plan] == [("length", 40), ("length", 40)]
    assert summary.failed == 1 and "no valid Plan" in rec["failed"] and "truncated" in rec["failed"]
    assert "output limit of 40 tokens" in rec["failed"]
    reask = bodies[1]["messages"][-1]["content"]
    assert "cut off" in reask and "shorter" in reask
    assert rec["usage"]["truncated"] == 2 and rec["usage"]["reasks"] == 1


@pytest.mark.slow
def test_without_a_cap_the_same_model_runs_to_the_servers_own_limit(calc, cfg_factory):
    # The contrast: with max_tokens not sent the generation only ends at the server's own limit.
    with LocalModelServer(ScriptResponder(calc_script(False)), loop_tools=("Plan",), grammar=False,
                          hard_limit=400) as srv:
        _run(calc, cfg_factory, srv, {"llm.send_max_tokens": False, "llm.node_output_tokens": {"planner": 40}})
        plan = [g for g in srv.generations if g["tool"] == "Plan"]
    assert plan[0]["ended"] == "limit" and plan[0]["tokens"] == 400


def _endless(**kw: Any) -> LocalModelServer:
    """A model that loops in the Planner's list at 50 tokens a second and honours no cap."""
    return LocalModelServer(ScriptResponder(calc_script(False)), loop_tools=("Plan",), grammar=False,
                            honour_max_tokens=False, token_s=0.02, **kw)


@pytest.mark.slow
def test_a_timed_out_call_stops_the_generation_and_is_retried_once_on_a_local_server(calc, cfg_factory, capsys):
    with _endless(hard_limit=100_000) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv, {"llm.timeout_s": 0.5}, event_lines=True)
        ended = time.monotonic()
        while srv.busy() and time.monotonic() - ended < 5:
            time.sleep(0.05)
        idle_after = time.monotonic() - ended
        gens = list(srv.generations)
    # One call and one retry (a local server), each generation stopped when the client went.
    assert [g["ended"] for g in gens] == ["client_gone", "client_gone"]
    assert all(g["end"] - g["start"] < 0.5 + 0.5 for g in gens)
    # Never two at once, and the retry waited for the server to see the client go.
    assert gens[1]["start"] >= gens[0]["end"] and gens[1]["start"] - gens[0]["start"] >= 0.5 + 0.9
    assert idle_after < 1.0
    assert summary.failed == 1 and "timed out: 2 call(s) of 0.5 s" in rec["failed"]
    assert "llm.timeout_s / FIXGRAPH_LLM_TIMEOUT" in rec["failed"]
    lines = [ln.split("] ", 1)[1] for ln in capsys.readouterr().err.splitlines() if ln.startswith("[")]
    # On a loaded machine a retry can fail to connect while the server still holds the abandoned
    # generation: a fault of its own, retried on its own count; it and the try after it are left
    # out of the lines checked below.
    blips = [i for i, ln in enumerate(lines) if re.search(r": (?!timeout )[^;]* after [\d.]+ s; retry ", ln)]
    first_timeout = next(i for i, ln in enumerate(lines) if ": timeout after " in ln)
    blips_before = sum(1 for i in blips if i < first_timeout)
    lines = [ln for i, ln in enumerate(lines) if i not in blips and i - 1 not in blips]
    assert rec["usage"]["timeouts"] == 2 and rec["usage"]["retries"] == 1 + len(blips)
    # --no-progress: one line per event, saying which call, why it is retried and what to change.
    iid = rec["instance_id"]
    knob = "(a slow server needs a longer llm.timeout_s / FIXGRAPH_LLM_TIMEOUT)"
    assert lines[0] == f"{iid}: started" and lines[1] == f"{iid} planner call 1: started"
    assert re.fullmatch(rf"{iid} planner call 1: timeout after 0\.\d s; retry 1/1 in 1\.0 s " + re.escape(knob), lines[2])
    # The try's number counts a blip before it too (one on the first try makes the retry try 3).
    assert re.fullmatch(rf"{iid} planner call 1: started \(try {2 + blips_before}\)", lines[3])
    assert re.fullmatch(rf"{iid} planner call 1: failed \(timeout\) after 0\.\d s " + re.escape(knob), lines[4])
    assert lines[5].startswith(f"{iid}: failed in ") and len(lines) == 6


@pytest.mark.slow
def test_without_streaming_an_abandoned_generation_runs_on_and_the_retry_queues_behind_it(calc, cfg_factory):
    # Why replies are streamed to local servers: a plain request's generation does not stop when
    # the client gives up, so each retry waits behind the one it abandoned.
    with _endless(hard_limit=60) as srv:
        _run(calc, cfg_factory, srv, {"llm.timeout_s": 0.3, "llm.stream": False})
        gens = list(srv.generations)
    assert gens[0]["ended"] == "limit" and gens[0]["end"] - gens[0]["start"] >= 1.0
    assert gens[1]["start"] >= gens[0]["end"]


@pytest.mark.slow
def test_a_prompt_over_the_servers_context_is_asked_once_unstreamed_and_ends_with_the_servers_reason(
        calc, cfg_factory, capsys):
    # llama-cpp-python's server streams a 200 and then fails on a prompt over --n_ctx: the client
    # sees a stream with no chunk. Read as an unreadable reply, it was retried four times, each
    # failing the same way, and the record never said why (the real Explorer's 20.5k tokens on
    # --n_ctx 16384). One plain request gets the 400 and its message; a 400 is not retried.
    with LocalModelServer(ScriptResponder(calc_script(False)), context_tokens=50) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv, event_lines=True)
        bodies = _bodies(srv, "Plan")
    assert [bool(b.get("stream")) for b in bodies] == [True, False] and srv.over_context == 2
    assert summary.failed == 1 and "answered 400" in rec["failed"]
    assert "exceed context window of 50" in rec["failed"]
    err = capsys.readouterr().err
    assert "planner call 1: empty stream after" in err and "asking once without streaming" in err


@pytest.mark.slow
def test_a_server_that_ignores_stream_gets_one_request_per_call(calc, cfg_factory, capsys):
    # Some OpenAI-compatible servers answer a streamed request with a plain JSON completion. Read
    # as an empty stream, every call was asked again without streaming: twice the requests, twice
    # the bill on a paid endpoint.
    with FakeLLMServer(ScriptResponder(calc_script(False)), ignore_stream=True) as srv:
        summary, rec, _ = _run(calc, cfg_factory, srv, {"llm.stream": True}, event_lines=True)
        posts = [r["body"] for r in srv.requests if r["body"] is not None]
    blips = transport_blips(capsys.readouterr().err)
    assert summary.patched == 1 and rec["plan"]["files"] == ["calc/ops.py"]
    assert posts and all(b.get("stream") is True for b in posts)
    usage = rec["usage"]
    assert usage["calls"] == usage["requests"] - len(blips) == len(posts), blips
    assert usage.get("retries", 0) == len(blips) and not usage.get("invalid")
    assert usage["input_tokens"] == 120 * len(posts)  # the usage block of each JSON reply was read


@pytest.mark.slow
def test_a_json_reply_that_is_no_completion_still_gets_the_one_unstreamed_request(calc, cfg_factory, capsys):
    class Refusing(FakeLLMServer):
        """Answers a streamed request with a 200 JSON error, a plain request with the 400."""

        def handle(self, handler: Any, body: dict[str, Any]) -> None:
            error = {"error": {"message": "model is loading", "type": "server_error"}}
            handler._send(200 if body.get("stream") else 400, error)

    with Refusing(ScriptResponder(calc_script(False))) as srv:
        summary, rec, _ = _run(calc, cfg_factory, srv, {"llm.stream": True}, event_lines=True)
        posts = [r["body"] for r in srv.requests if r["body"] is not None]
    blips = transport_blips(capsys.readouterr().err)
    assert [b.get("stream") for b in posts] == [True, False]
    assert summary.failed == 1 and "answered 400" in rec["failed"] and "model is loading" in rec["failed"]
    assert rec["usage"]["requests"] == 2 + len(blips) and not rec["usage"].get("calls"), blips


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False])
def test_cut_tool_arguments_are_named_truncated_not_a_missing_call(calc, cfg_factory, stream):
    # The server cuts every reply's arguments at 30 characters yet says finish_reason: tool_calls.
    with LocalModelServer(ScriptResponder(calc_script(False)), truncate_at=30) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv, {"llm.stream": stream})
        bodies = _bodies(srv, "Plan")
    assert summary.failed == 1 and len(bodies) == 2
    assert "no valid Plan from the LLM: truncated: the Plan arguments end before their JSON does" in rec["failed"]
    assert "did not call" not in rec["failed"]
    reask = bodies[1]["messages"][-1]["content"]
    assert reask.startswith("Your previous reply was cut off") and "much shorter" in reask
    assert rec["usage"]["truncated"] == 2 and rec["usage"]["by_node"]["planner"]["truncated"] == 2


@pytest.mark.slow
def test_an_empty_plan_is_reasked_once_and_the_second_answer_used(calc, cfg_factory):
    script = calc_script(False)
    script["Plan"] = [{"files": [], "reasoning": "none"}] + script["Plan"]
    with FakeLLMServer(ScriptResponder(script)) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv)
        bodies = _bodies(srv, "Plan")
    assert summary.patched == 1 and len(bodies) == 2
    assert bodies[1]["messages"][-1]["content"].startswith("Your previous reply was empty: the Plan reply is empty: "
                                                           "it named no files")
    assert rec["usage"]["empty"] == 1 and rec["usage"]["reasks"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("tool,reply,node,why", [
    ("ExploreStep", {"suspects": []}, "explorer", "no suspects and no files to read next"),
    ("CodeChange", {"edits": [], "explanation": "nothing"}, "coder", "it had no edits"),
])
def test_an_empty_reply_twice_ends_the_task_with_the_reason(calc, cfg_factory, tool, reply, node, why):
    script = calc_script(False)
    script[tool] = [reply]
    with FakeLLMServer(ScriptResponder(script)) as srv:
        summary, rec, cfg = _run(calc, cfg_factory, srv)
        asked = _bodies(srv, tool)
    assert summary.failed == 1 and len(asked) == 2
    assert rec["stop_reason"].startswith(f"failed in {node}: no valid {tool} from the LLM: empty:") and why in rec["failed"]
    assert rec["usage"]["by_node"][node]["empty"] == 2 and rec["status"] == "failed"


def test_the_screen_shows_each_task_in_flight_with_its_call_retries_and_the_knob():
    activity = Activity()
    activity.started("t-1")
    activity.started("t-2")
    assert activity.rows() == ["  t-1: preparing (worktree, index)", "  t-2: preparing (worktree, index)"]
    activity.event("t-1", CallEvent("planner", "start", 1))
    activity.event("t-1", CallEvent("planner", "retry", 1, 120.0, "timeout", "retry 1/1 in 1.0 s", TIMEOUT_KNOB))
    activity.event("t-1", CallEvent("planner", "start", 1, detail="try 2"))
    activity.event("t-2", CallEvent("coder", "start", 2))
    activity.event("t-2", CallEvent("coder", "reask", 2, cause="truncated", detail="cut"))
    rows = activity.rows()
    assert rows[0] == ("  t-1: planner call 1, try 2, 0 s; retried: 1x timeout; "
                       "calls time out: raise llm.timeout_s / FIXGRAPH_LLM_TIMEOUT")
    assert rows[1] == "  t-2: coder call 2, 0 s; retried: 1x truncated reply"
    activity.event("t-2", CallEvent("coder", "done", 2, 3.0))
    # The task's retries so far stay on its line.
    assert activity.rows()[1] == ("  t-2: after coder call 2, working 0 s (no LLM call in flight); "
                                  "retried: 1x truncated reply")
    activity.finished("t-1", {"status": "failed"})
    assert len(activity.rows()) == 1


def test_the_summary_counts_empty_tasks_and_names_a_predictions_file_only_when_written(tmp_path):
    from pipeline.tasks import RunSummary

    summary = RunSummary("r", total=3, predictions=str(tmp_path / "r.jsonl"))
    for status, timeouts in (("patched", 0), ("empty", 2), ("failed", 1)):
        summary.add({"status": status, "usage": {"timeouts": timeouts}})
    assert "(1 patched, 1 empty, 1 failed)" in summary.line()
    assert summary.line().endswith("; 3 LLM calls timed out (llm.timeout_s / FIXGRAPH_LLM_TIMEOUT)")
    assert summary.predictions_line() == "predictions: none written (no task produced a patch)"
    (tmp_path / "r.jsonl").write_text("{}\n")
    assert summary.predictions_line() == f"predictions: {tmp_path / 'r.jsonl'}"


def test_the_bots_default_port_is_no_local_servers_port():
    from urllib.parse import urlsplit

    from fixgraph.config import PROJECT_ROOT, GitHubSettings
    from fixgraph.models.discover import LOCAL_SERVERS

    port = GitHubSettings().webhook_port
    assert port not in {urlsplit(url).port for _, url in LOCAL_SERVERS}
    assert f"FIXGRAPH_WEBHOOK_PORT={port}\n" in (PROJECT_ROOT / ".env.example").read_text()


def test_a_server_named_without_a_key_bills_nothing_whatever_its_models_name(tmp_path):
    # The smoke's summary said $0.0119 for a llama.cpp server given as OPENAI_BASE_URL: the
    # config's model names stayed gpt-4o-mini and were charged OpenAI's price.
    from fixgraph.config import load_config
    from fixgraph.models.discover import resolve_llm

    cfg, _ = resolve_llm(load_config("redo", env={"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}), [])
    assert cfg.llm.models.planner == "gpt-4o-mini" and cfg.llm.prices == {}
    keyed, _ = resolve_llm(load_config("redo", env={"OPENAI_API_KEY": "sk-x"}), [])
    assert keyed.llm.prices["gpt-4o-mini"].input > 0


def test_a_reply_without_usage_is_charged_an_estimate():
    from langchain_core.messages import AIMessage

    from fixgraph.config import Budget
    from fixgraph.models.llm import Meter

    meter = Meter(Budget(), {})
    reply = AIMessage(content="", tool_calls=[{"name": "Plan", "args": {"files": ["a" * 38]}, "id": "c1"}])
    usage = meter.charge("planner", "m", reply, prompt_chars=400)
    assert (usage.get("input_tokens"), usage.get("output_tokens")) == (100, 13) and meter.tokens == 113


@pytest.mark.slow
def test_local_model_smoke_reports_per_node_and_per_task(calc, tmp_path, capsys, monkeypatch):
    from eval import local_model_smoke
    from eval.fixtures.repos import write_dataset

    mirrors, inst = calc
    ds = write_dataset(tmp_path / "ds.jsonl", [inst.model_dump()])
    monkeypatch.setenv("FIXGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(ScriptResponder(calc_script(False))) as srv:
        code = local_model_smoke.main(["--base-url", srv.base_url, "--model", "fake", "--tasks", inst.instance_id,
                                       "--dataset", str(ds), "--repos", str(mirrors), "--config", "baseline"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("node        calls  tokens_in")
    assert any(ln.startswith("planner         1") for ln in out)
    assert f"{inst.instance_id}: patched in" in "\n".join(out)
    assert any(ln.startswith("server idle after the run: a 1-token request answered in") for ln in out)
