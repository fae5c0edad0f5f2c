"""python graph.py --check: each part ready or not, and what to do; exit 0 only when all are."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval.fakes.github_api import FakeGitHub
from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fakes.local_llm_server import LocalModelServer
from fixgraph.config import load_config
from pipeline.preflight import (
    Check,
    check_github,
    check_pyright,
    check_tool_calling,
    print_report,
    run_checks,
)

ROOT = Path(__file__).resolve().parents[2]
NO_TOOLS = ("NOT READY  tool calling m1: the model did not answer with a tool call: the nodes need tool "
            "calling (structured output); use a model that supports it, or start the server with tool "
            "calling on (vLLM: --enable-auto-tool-choice --tool-call-parser ...)")


def check(tmp_path: Path, base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE", "GITHUB"))}
    env.update(OPENAI_API_KEY="k", OPENAI_BASE_URL=base_url, EVAL_MODE="true",
               FIXGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), "--check", "--model", "m1", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


PLAN = {"files": ["pkg/module_3.py"], "reasoning": "render_3 lives there."}


@pytest.mark.slow
def test_check_against_a_good_server_exits_0(tmp_path: Path) -> None:
    with FakeLLMServer(ScriptResponder({"Ping": [{"ok": True}], "Plan": [PLAN]}), models=("m1",)) as srv:
        proc = check(tmp_path, srv.base_url)
        calls = [r for r in srv.requests if r["body"]]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "all ready"
    parts = [ln.split(":", 1)[0].split(None, 1)[1] for ln in lines[:-1]]
    assert parts == ["LLM endpoint", "model m1", "tool calling m1", "speed m1", "pyright", "git",
                     "test backend venv", "GitHub"]
    # One tiny real call for the one model, offering the Ping tool; then one Planner-sized call.
    assert len(calls) == 2 and calls[0]["body"]["tools"][0]["function"]["name"] == "Ping"
    plan = calls[1]["body"]
    assert plan["tools"][0]["function"]["name"] == "Plan" and plan["max_tokens"] == 1024
    assert len(plan["messages"][1]["content"]) > 6000 * 4
    assert re.fullmatch(r"ready      speed m1: a Planner-sized call \(150 tokens\) took \d+\.\d s; a task makes "
                        r"about 6 calls \(up to \d+\): about \d+ s, up to \d+ s", lines[3]), lines[3]


def _speed(srv: LocalModelServer, **overrides: object) -> list[Check]:
    cfg = load_config("redo", env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url},
                      overrides={"llm.models": {r: "fake" for r in ("planner", "explorer", "coder", "critic")},
                                 **overrides})
    return [c for c in run_checks(cfg) if c.part.startswith(("speed", "tool calling"))]


@pytest.mark.slow
def test_check_measures_a_slow_server_and_warns_before_a_run_would_time_out(tmp_path: Path) -> None:
    # About 0.05 s a token: the Planner-sized reply takes about a second.
    with LocalModelServer(ScriptResponder({"Ping": [{"ok": True}], "Plan": [PLAN]}), token_s=0.05) as srv:
        slow = _speed(srv, **{"llm.timeout_s": 1.6, "budget.task_tokens": 3000})
        too_slow = _speed(srv, **{"llm.timeout_s": 0.5})
    assert slow[0].ready and slow[1].ready and slow[1].warning
    assert "may pass llm.timeout_s = 1.6 s: raise llm.timeout_s / FIXGRAPH_LLM_TIMEOUT" in slow[1].detail
    assert "over budget.task_tokens = 3000" in slow[1].detail
    out: list[str] = []
    assert print_report(slow, out.append) and out[1].startswith("WARNING    speed fake: a Planner-sized call")
    assert too_slow[1].part == "speed fake" and not too_slow[1].ready
    assert too_slow[1].detail == ("a Planner-sized call did not finish within llm.timeout_s = 0.5 s: the server is "
                                  "too slow for that setting; raise llm.timeout_s / FIXGRAPH_LLM_TIMEOUT, or use a "
                                  "smaller model")


@pytest.mark.slow
def test_check_without_a_key_or_a_server_still_checks_every_other_part(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE", "GITHUB"))}
    env.update(EVAL_MODE="true", FIXGRAPH_LOCAL_SERVERS="", FIXGRAPH_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), "--check"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("NOT READY  LLM endpoint: OPENAI_API_KEY is not set")
    parts = [ln.split(":", 1)[0].split(None, 1)[1] for ln in lines[1:-1]]
    assert parts == ["pyright", "git", "test backend venv", "GitHub"] and lines[-1] == "1 part(s) not ready"


def test_pyright_is_found_beside_the_interpreter_and_the_advice_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from scoring.static.differential import pyright_command

    monkeypatch.setenv("PATH", "/nonexistent")
    cfg = load_config("redo", env={"OPENAI_API_KEY": "k"})
    assert pyright_command(cfg.critic) == [str(Path(sys.executable).parent / "pyright")]
    missing = load_config("redo", env={"OPENAI_API_KEY": "k"}, overrides={"critic.pyright": "no-such-pyright"})
    detail = check_pyright(missing).detail
    assert detail.count("pip install pyright") == 1 and f"on PATH and in {Path(sys.executable).parent}" in detail


@pytest.mark.slow
def test_check_against_a_server_without_tool_calling_says_exactly_that(tmp_path: Path) -> None:
    with FakeLLMServer(ScriptResponder({}), models=("m1",), tools=False) as srv:
        proc = check(tmp_path, srv.base_url)
    assert proc.returncode == 1
    assert NO_TOOLS in proc.stdout.splitlines()
    assert proc.stdout.strip().splitlines()[-1] == "1 part(s) not ready"


@pytest.mark.slow
def test_a_model_the_server_lacks_and_a_server_that_is_down(tmp_path: Path) -> None:
    with FakeLLMServer(ScriptResponder({}), models=("other",)) as srv:
        cfg = load_config("baseline", env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url})
        checks = run_checks(cfg)
    bad = [c for c in checks if not c.ready]
    assert [c.part for c in bad] == ["model gpt-4o", "model gpt-4o-mini"]
    assert "not listed by the server (it has: other); pass --model NAME" in bad[0].detail
    cfg = load_config("baseline", env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    checks = run_checks(cfg, tool_check=lambda c, m: pytest.fail("no tool check without an endpoint"))
    assert not checks[0].ready and "does not answer GET /models" in checks[0].detail
    out: list[str] = []
    assert not print_report(checks, out.append)
    assert out[0].startswith("NOT READY  LLM endpoint: http://127.0.0.1:9/v1 does not answer")


@pytest.mark.slow
def test_tool_calling_check_passes_through_the_llm_class(tmp_path: Path) -> None:
    with FakeLLMServer(ScriptResponder({"Ping": [{"ok": True}]}), models=("m1",)) as srv:
        cfg = load_config("redo", env={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url},
                          overrides={"llm.models.coder": "m1"})
        assert check_tool_calling(cfg, "m1").ready


@pytest.fixture
def github(tmp_path: Path) -> Iterator[FakeGitHub]:
    gh = FakeGitHub(tmp_path / "served", tokens={"ghp_classic", "ghp_narrow", "github_pat_fine"},
                    token_scopes={"ghp_classic": "repo, workflow", "ghp_narrow": "read:org"}).start()
    yield gh
    gh.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("token", "ready", "says"), [
    ("ghp_classic", True, "token of fixgraph-bot, scopes repo, workflow"),
    ("ghp_narrow", False, "has scopes read:org; publishing needs repo"),
    ("github_pat_fine", True, "fine-grained: needs Contents, Issues and Pull requests"),
    ("ghp_wrong", False, "GET /user answered 401"),
])
def test_github_token_scopes(github: FakeGitHub, token: str, ready: bool, says: str) -> None:
    cfg = load_config("redo", env={"GITHUB_TOKEN": token, "GITHUB_BASE_URL": github.base_url, "EVAL_MODE": "false"},
                      overrides={"github.request_pause_s": 0, "github.write_pause_s": 0})
    got = check_github(cfg)
    assert got.ready is ready and says in got.detail, got.detail


def test_github_is_not_checked_in_eval_mode() -> None:
    assert check_github(load_config("redo", env={"EVAL_MODE": "true"})).ready


def test_test_backend_docker_without_an_engine_and_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import scoring.execution.docker  # noqa: F401 - imported (it imports GitPython, which needs git) before PATH goes
    from pipeline.preflight import check_test_backend

    with monkeypatch.context() as m:
        m.setenv("PATH", str(tmp_path))  # no docker CLI on it
        got = check_test_backend(load_config("redo", env={}, overrides={"tests.backend": "docker"}))
    assert not got.ready
    assert got.detail == 'no docker CLI on this machine: start Docker, or set [tests] backend = "venv"'
    venv = check_test_backend(load_config("redo", env={}))
    assert venv.ready  # venv: python -m venv works here
    assert venv.detail.endswith(("tests sandboxed as uid 59999 in namespaces of their own",
                                 "tests sandboxed in a user namespace of their own"))
    # a container without namespaces (the probe is cached: a stand-in, not a PATH change)
    monkeypatch.setattr("fixgraph.sandbox.process.sandbox_mode", lambda: "none")
    bare = check_test_backend(load_config("redo", env={}, overrides={"tests.backend": "local"}))
    assert bare.ready and "NO SANDBOX: namespaces (unshare) are unavailable here" in bare.detail
    assert check_test_backend(load_config("baseline", env={})).detail == "not used by this config"
    no_tests = load_config("redo", env={}, overrides={"critic.tests": "off", "tests.backend": "docker"})
    assert check_test_backend(no_tests).detail == "not used by this config"
