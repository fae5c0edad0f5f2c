"""A model found on its own: local OpenAI-compatible servers probed on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from fixgraph.config import ConfigError, load_config
from fixgraph.models.discover import LOCAL_SERVERS, probe, resolve_llm

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never answers: the probe must not wait on it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def no_llm_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH"))}


@pytest.mark.slow
def test_probe_uses_the_first_server_in_order_that_answers(silent: int) -> None:
    with FakeLLMServer(ScriptResponder({}), models=("qwen2.5-coder:7b", "llama3")) as srv:
        servers = [("dead", f"http://127.0.0.1:{closed_port()}/v1"), ("silent", f"http://127.0.0.1:{silent}/v1"),
                   ("fake", srv.base_url)]
        t0 = time.monotonic()
        found = probe(servers, timeout_s=1.0)
        assert time.monotonic() - t0 < 2.0
    assert found is not None and (found.name, found.base_url) == ("fake", srv.base_url)
    assert found.models == ("qwen2.5-coder:7b", "llama3")


@pytest.mark.slow
def test_no_key_and_no_url_uses_the_server_found_and_says_so_in_one_line() -> None:
    cfg = load_config("redo", env={"FIXGRAPH_MODEL_CODER": "llama3"})
    with FakeLLMServer(ScriptResponder({}), models=("qwen2.5-coder:7b", "llama3")) as srv:
        got, line = resolve_llm(cfg, [("vLLM", srv.base_url)])
    assert got.llm.base_url == srv.base_url and got.llm.api_key is not None
    # The coder's model was chosen and exists; the others were defaults the server lacks.
    assert got.llm.models.coder == "llama3"
    assert {got.llm.models.planner, got.llm.models.explorer, got.llm.models.critic} == {"qwen2.5-coder:7b"}
    assert line == f"fixgraph: using vLLM at {srv.base_url}, model llama3, qwen2.5-coder:7b"


def test_a_key_or_a_url_already_set_probes_nothing() -> None:
    cfg = load_config("redo", env={"OPENAI_API_KEY": "sk-x"})
    assert resolve_llm(cfg, [("never", "http://127.0.0.1:9/v1")]) == (cfg, None)
    cfg = load_config("redo", env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    got, line = resolve_llm(cfg, [])
    assert line is None and got.llm.base_url == "http://127.0.0.1:9/v1" and got.llm.api_key is not None


@pytest.mark.slow
def test_nothing_listening_fails_within_3s_listing_what_was_tried(silent: int) -> None:
    servers = [("Ollama", f"http://127.0.0.1:{closed_port()}/v1"), ("vLLM", f"http://127.0.0.1:{silent}/v1")]
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        resolve_llm(load_config("redo", env={}), servers)
    assert time.monotonic() - t0 < 3.0
    msg = str(err.value)
    assert "OPENAI_API_KEY is not set" in msg
    assert f"tried Ollama ({servers[0][1].removesuffix('/v1')}), vLLM ({servers[1][1].removesuffix('/v1')})" in msg


@pytest.mark.slow
def test_the_default_ports_are_probed() -> None:
    """A fake bound on a real default port is found by the default probe."""
    for name, url in LOCAL_SERVERS:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        try:
            srv = FakeLLMServer(ScriptResponder({}), port=port, models=("local-model",))
        except OSError:
            continue  # something else uses that port here; try the next default
        with srv:
            found = probe()
        assert found is not None
        names = [n for n, _ in LOCAL_SERVERS]
        # An earlier default port may hold a real server on this machine; otherwise it is ours.
        assert names.index(found.name) <= names.index(name)
        if found.name == name:
            assert found.models == ("local-model",)
        return
    pytest.skip("every default port (11434, 8000, 1234, 8080) is in use on this machine")


@pytest.mark.slow
def test_graph_py_without_key_finds_the_server_and_with_nothing_fails_in_3s(tmp_path: Path) -> None:
    env = no_llm_env()
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), "--tasks", "all", "--dataset",
                           str(tmp_path / "none.jsonl")], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "FIXGRAPH_LOCAL_SERVERS": dead}, timeout=60)
    assert time.monotonic() - t0 < 3.0 + 7.0  # the probe's 3 s, plus starting Python on a loaded machine
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no local server answered" in lines[0] and dead.removesuffix("/v1") in lines[0]

    with FakeLLMServer(ScriptResponder({}), models=("m1",)) as srv:
        proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), "--tasks", "all", "--dataset",
                               str(tmp_path / "none.jsonl"), "--model-coder", "m1"], cwd=tmp_path,
                              capture_output=True, text=True, env={**env, "FIXGRAPH_LOCAL_SERVERS": srv.base_url},
                              timeout=60)
    lines = proc.stderr.strip().splitlines()
    # Found, said in one line, then the next problem: the dataset file does not exist.
    assert lines[0] == f"fixgraph: using server at {srv.base_url}, model m1", proc.stderr
    assert proc.returncode == 2 and "none.jsonl" in lines[-1]


@pytest.mark.slow
def test_something_else_on_a_default_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A service that does not speak HTTP (or serves a web app) there is not a model server."""
    import threading

    raised: list[object] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)

    def garbage() -> None:
        conn, _ = s.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        conn.close()

    threading.Thread(target=garbage, daemon=True).start()
    with FakeLLMServer(ScriptResponder({}), models=("m",)) as srv:
        found = probe([("other", f"http://127.0.0.1:{s.getsockname()[1]}/v1"), ("fake", srv.base_url)])
    s.close()
    assert found is not None and found.name == "fake"
    assert raised == []
