"""Polling mode, GitHub App auth, and the bot's command line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import bot.__main__ as cli
from bot.events import Trigger
from bot.poll import Poller
from eval.fakes.github_api import FakeGitHub, labeled_payload, make_fixture_repo
from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from fixgraph.config import ConfigError, load_config
from fixgraph.github.client import GitHubAccess
from fixgraph.github.pr import MARKER
from tests.bot.test_bot_webhook import StandInPipeline
from tests.helpers.bot_harness import SECRET, TOKEN, Bot, bot_config


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    gh = FakeGitHub(tmp_path / "served", tokens={TOKEN}).start()
    bare, _ = make_fixture_repo(tmp_path / "fixture")
    gh.add_repo("acme/calc", bare)
    yield gh
    gh.stop()


def poller(fake: FakeGitHub, tmp_path: Path, found: list[Trigger]) -> Poller:
    cfg = bot_config(fake, tmp_path)
    return Poller(cfg, GitHubAccess(cfg), "acme/calc", lambda t: found.append(t) or True, tmp_path / "state")


@pytest.mark.slow
def test_poll_first_cycle_takes_open_labeled_issues_then_only_new_events(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_issue("acme/calc", 7, "add subtracts", "b", labels=("fixgraph",))
    fake.add_issue("acme/calc", 8, "handled already", "b", labels=("fixgraph",))
    fake.comment("acme/calc", 8, f"fixgraph opened a pull request\n{MARKER}", user="fixgraph-bot[bot]")
    fake.add_issue("acme/calc", 9, "other label", "b", labels=("bug",))
    fake.add_issue("acme/calc", 10, "later", "b")
    fake.add_issue("acme/calc", 11, "twice", "b")
    fake.add_issue("acme/calc", 12, "commented", "b")
    found: list[Trigger] = []
    p = poller(fake, tmp_path, found)

    assert [t.number for t in p.poll_once()] == [7]
    assert p.poll_once() == []  # nothing new: nothing again, no replay of history

    fake.label("acme/calc", 10, "fixgraph")
    fake.label("acme/calc", 11, "fixgraph")
    fake.label("acme/calc", 11, "fixgraph")  # added twice quickly: one trigger
    fake.label("acme/calc", 12, "wontfix")
    fake.comment("acme/calc", 12, "/fixgraph", user="carol", association="COLLABORATOR")
    fake.comment("acme/calc", 12, "/fixgraph", user="mallory", association="NONE")
    fake.comment("acme/calc", 9, f"/fixgraph is on it {MARKER}", user="fixgraph-bot[bot]", association="NONE")
    again = p.poll_once()
    assert sorted((t.number, t.reason) for t in again) == [(10, "label"), (11, "label"), (12, "comment")]
    assert p.poll_once() == []
    assert [t.number for t in found] == [7, *[t.number for t in again]]
    # The cursor survives a restart.
    assert poller(fake, tmp_path, []).poll_once() == []


@pytest.mark.slow
def test_poll_cli_once_runs_the_jobs_it_found(fake: FakeGitHub, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake.add_issue("acme/calc", 7, "add subtracts", "", labels=("fixgraph",))
    pipeline = StandInPipeline()
    monkeypatch.chdir(tmp_path)
    # The bot's preflight calls each model once: a loopback server that lists them and calls tools.
    llm = FakeLLMServer(ScriptResponder({"Ping": [{"ok": True}], "Plan": [{"files": ["calc.py"], "reasoning": "r"}]}),
                        models=("gpt-4o", "gpt-4o-mini")).start()
    for key, value in {"GITHUB_TOKEN": TOKEN, "GITHUB_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-x",
                       "OPENAI_BASE_URL": llm.base_url, "FIXGRAPH_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("bot.worker.default_run_fn", lambda: pipeline)
    try:
        assert cli.main(["--config", "redo", "poll", "--repo", "acme/calc", "--once"]) == 0
    finally:
        llm.stop()
    # One probe call per distinct model, and one Planner-sized call to measure the speed.
    assert len([r for r in llm.requests if r["body"]]) == 3
    assert "GITHUB_TOKEN" not in os.environ and "OPENAI_API_KEY" not in os.environ  # scrubbed
    assert [i.instance_id for i in pipeline.instances] == ["acme__calc-7"]
    assert len(fake.open_pulls("acme/calc")) == 1
    assert (tmp_path / "cache" / "bot" / "poll-acme+calc.json").is_file()


@pytest.mark.parametrize("argv, env, message", [
    (["serve"], {"GITHUB_TOKEN": "t", "FIXGRAPH_ALLOWLIST": "a/b"}, "GITHUB_WEBHOOK_SECRET is not set"),
    (["serve"], {"GITHUB_TOKEN": "t", "GITHUB_WEBHOOK_SECRET": "s"}, "FIXGRAPH_ALLOWLIST is empty"),
    (["serve"], {"GITHUB_WEBHOOK_SECRET": "s", "FIXGRAPH_ALLOWLIST": "a/b"}, "set GITHUB_TOKEN, or GITHUB_APP_ID"),
    (["poll", "--repo", "nope"], {"GITHUB_TOKEN": "t"}, "--repo must be owner/name"),
    (["poll", "--repo", "a/b"], {"GITHUB_APP_ID": "5", "GITHUB_APP_PRIVATE_KEY": "/no/such.pem"},
     "GITHUB_APP_PRIVATE_KEY is neither"),
])
def test_cli_bad_settings_give_one_line_and_exit_2(argv: list[str], env: dict[str, str], message: str,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for key in ("GITHUB_TOKEN", "GITHUB_WEBHOOK_SECRET", "FIXGRAPH_ALLOWLIST", "GITHUB_APP_ID",
                "GITHUB_APP_PRIVATE_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("FIXGRAPH_WEBHOOK_PORT", "0")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


# ---- GitHub App ------------------------------------------------------------------------

@pytest.fixture
def app_key(tmp_path: Path) -> tuple[str, str, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    path = tmp_path / "app.pem"
    path.write_text(pem)
    path.chmod(0o600)
    return pem, public, path


@pytest.mark.slow
def test_github_app_installation_token_drives_api_and_push(fake: FakeGitHub, tmp_path: Path,
                                                           app_key: tuple[str, str, Path]) -> None:
    _pem, public, path = app_key
    fake.tokens.clear()  # only tokens minted for the installation are good now
    fake.app_id, fake.app_public_key = 321, public
    fake.installations["acme/calc"] = 42
    fake.add_issue("acme/calc", 7, "add subtracts", "b")
    env = {"GITHUB_APP_ID": "321", "GITHUB_APP_PRIVATE_KEY": str(path), "GITHUB_BASE_URL": fake.base_url,
           "GITHUB_WEBHOOK_SECRET": SECRET, "FIXGRAPH_ALLOWLIST": "acme/calc", "OPENAI_API_KEY": "sk-x"}
    cfg = load_config("redo", env=env, overrides={
        "github.request_pause_s": 0, "github.write_pause_s": 0, "cache_dir": str(tmp_path / "cache"),
        "runs_dir": str(tmp_path / "runs"), "predictions_dir": str(tmp_path / "preds")})
    pipeline = StandInPipeline()
    b = Bot(fake, tmp_path, pipeline, cfg=cfg)
    try:
        assert b.post("issues", labeled_payload("acme/calc", 7, installation=42))[0] == 202
        assert b.jobs.wait_idle(30)
    finally:
        b.close()
    assert len(fake.issued_tokens) == 1  # one token for the job, reused by the API client and git
    [pr] = fake.open_pulls("acme/calc")
    assert pr["head"]["ref"] == "fixgraph/7-add-subtracts"
    token = fake.issued_tokens[0]
    assert all(s.headers.get("authorization") == f"token {token}" for s in fake.requests
               if not s.path.startswith("/app/"))
    assert token not in fake.all_text()
    # Polling as an App finds the installation from the repository.
    access = GitHubAccess(cfg)
    assert access.installation_for("acme/calc") == 42


def test_app_without_key_is_a_config_error(tmp_path: Path) -> None:
    cfg = load_config("redo", env={"GITHUB_APP_ID": "5"})
    with pytest.raises(ConfigError, match="GITHUB_APP_PRIVATE_KEY is not"):
        GitHubAccess(cfg)


def test_log_formatter_redacts_configured_secrets_and_token_shapes() -> None:
    import logging

    fmt = cli.RedactingFormatter(["my-webhook-secret"])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "push with %s and %s failed (%s)",
                               ("ghs_" + "a" * 36, "github_pat_" + "B1_" * 10, "my-webhook-secret"), None)
    line = fmt.format(record)
    assert "ghs_" not in line and "github_pat_" not in line and "my-webhook-secret" not in line
    assert line.count("***") == 3


@pytest.mark.slow
def test_the_bot_does_not_start_when_its_model_cannot_call_tools(
        fake: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeLLMServer(ScriptResponder({}), models=("gpt-4o", "gpt-4o-mini"), tools=False) as llm:
        for key, value in {"GITHUB_TOKEN": TOKEN, "GITHUB_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-x",
                           "OPENAI_BASE_URL": llm.base_url, "FIXGRAPH_CACHE_DIR": str(tmp_path / "cache")}.items():
            monkeypatch.setenv(key, value)
        assert cli.main(["--config", "redo", "poll", "--repo", "acme/calc", "--once"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "fixgraph bot: NOT READY  tool calling gpt-4o: the model did not answer with a tool call" in "\n".join(err)
    assert err[-1] == "fixgraph bot: 2 part(s) not ready"
    assert not (tmp_path / "cache" / "bot").exists()  # nothing polled


@pytest.mark.slow
def test_serve_cli_answers_ping_and_stops_on_sigterm(tmp_path: Path) -> None:
    import json
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    from bot.events import sign

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB", "FIXGRAPH", "OPENAI"))}
    env.update(GITHUB_TOKEN=TOKEN, GITHUB_WEBHOOK_SECRET=SECRET, FIXGRAPH_ALLOWLIST="acme/*",
               OPENAI_API_KEY="sk-x", FIXGRAPH_WEBHOOK_PORT="0", FIXGRAPH_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen([sys.executable, "-m", "bot", "--no-check", "serve"], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"listening on (http://[\d.]+:\d+)", line)
        assert m, line
        body = json.dumps({"zen": "Design for failure."}).encode()
        req = urllib.request.Request(m.group(1) + "/webhook", data=body, method="POST", headers={
            "X-GitHub-Event": "ping", "X-Hub-Signature-256": sign(SECRET, body), "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert TOKEN not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
