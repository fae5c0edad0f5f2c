"""graph.py's command line: bad input fails fast with one line and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_graph(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 60):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
    # No discovery of this machine's own LLM servers (a llama.cpp on 8080 answered it here).
    base["FIXGRAPH_LOCAL_SERVERS"] = ""
    base.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), *args], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_no_api_key_fails_in_seconds_naming_the_setting(tmp_path):
    t0 = time.monotonic()
    proc = run_graph(["--tasks", "stratified50"], tmp_path, {"EVAL_MODE": "true"})
    assert time.monotonic() - t0 < 20
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0]
    assert not (tmp_path / "predictions").exists() or not any((tmp_path / "predictions").iterdir())


@pytest.mark.slow
def test_unknown_task_id(tmp_path, calc):
    from eval.fixtures.repos import make_calc_repo, write_dataset

    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(tmp_path / "m2")])
    proc = run_graph(["--tasks", "nope__nope-1", "--dataset", str(ds)], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["fixgraph: error: unknown task id 'nope__nope-1': not in the dataset"]
    assert not (tmp_path / "predictions").exists() or not any((tmp_path / "predictions").iterdir())


@pytest.mark.slow
def test_malformed_jsonl_line(tmp_path):
    ds = tmp_path / "bad.jsonl"
    ds.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "x", "problem_statement": "p"}\n{not json\n')
    proc = run_graph(["--tasks", "all", "--dataset", str(ds)], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2
    msg = proc.stderr.strip().splitlines()
    assert len(msg) == 1 and "bad.jsonl:2: malformed JSON line" in msg[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_checkpoint_file_that_is_not_a_database_stops_the_run_with_one_line(tmp_path, calc):
    from eval.fixtures.repos import make_calc_repo, write_dataset

    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(tmp_path / "m3")])
    db = tmp_path / "runs" / "r1" / "checkpoints.sqlite"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not a database, it is a text file long enough to have a header" * 20)
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder

    with FakeLLMServer(ScriptResponder({}), models=("gpt-4o-mini",)) as srv:  # an endpoint that passes the gate
        proc = run_graph(["--tasks", "all", "--dataset", str(ds), "--run-id", "r1", "--no-progress"], tmp_path,
                         {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url, "EVAL_MODE": "true"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fixgraph: error: checkpoint database ") and "r1" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_unknown_config_and_bad_eval_mode(tmp_path):
    proc = run_graph(["--config", "nosuch"], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2 and "unknown config 'nosuch'" in proc.stderr
    proc = run_graph([], tmp_path, {"OPENAI_API_KEY": "k", "EVAL_MODE": "maybe"})
    assert proc.returncode == 2 and "EVAL_MODE must be true or false" in proc.stderr


@pytest.mark.slow
def test_ctrl_c_keeps_finished_tasks_and_the_next_run_resumes(tmp_path):
    import json
    import signal
    import threading

    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
    from eval.fixtures.repos import calc_script, make_calc_repo, write_dataset

    mirrors = tmp_path / "mirrors"
    insts = [make_calc_repo(mirrors, name="calc"), make_calc_repo(mirrors, name="calc2")]
    ds = write_dataset(tmp_path / "ds.jsonl", insts)
    inner = ScriptResponder(calc_script(False))
    plans = []
    release = threading.Event()

    def responder(tool, body):
        if tool == "Plan":
            plans.append(1)
            if len(plans) == 2:  # the second task hangs until the test lets it go
                release.wait(30)
        return inner(tool, body)

    args = ["--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--config", "baseline",
            "--run-id", "cc", "--no-progress"]
    with FakeLLMServer(responder) as srv:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
        env.update(OPENAI_API_KEY="k", OPENAI_BASE_URL=srv.base_url, EVAL_MODE="true",
                   FIXGRAPH_CACHE_DIR=str(tmp_path / "cache"))
        # As from a terminal: a test session started in the background (``.ci/run &``) ignores SIGINT,
        # and a child would inherit that and never see the Ctrl-C.
        proc = subprocess.Popen([sys.executable, str(ROOT / "graph.py"), *args], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        records = tmp_path / "runs" / "cc" / "records"
        deadline = time.monotonic() + 60
        while len(plans) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(plans) == 2, "the second task never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        release.set()
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        done = sorted(p.stem for p in records.glob("*.json"))
        assert done == ["fixture__calc-1"]
        first_diff = (tmp_path / "predictions" / "fixture__calc-1.diff").read_bytes()

        again = subprocess.run([sys.executable, str(ROOT / "graph.py"), *args], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "1 already done" in again.stdout
    assert sorted(p.stem for p in records.glob("*.json")) == ["fixture__calc-1", "fixture__calc2-1"]
    assert (tmp_path / "predictions" / "fixture__calc-1.diff").read_bytes() == first_diff
    lines = (tmp_path / "predictions" / "cc.jsonl").read_text().splitlines()
    assert sorted(json.loads(ln)["instance_id"] for ln in lines) == ["fixture__calc-1", "fixture__calc2-1"]


@pytest.mark.slow
def test_a_cache_inside_the_repositories_folder_is_refused_in_one_line(tmp_path, calc):
    from eval.fixtures.repos import make_calc_repo, write_dataset

    mirrors = tmp_path / "own-mirrors"
    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(mirrors)])
    proc = run_graph(["--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors)], tmp_path,
                     {"OPENAI_API_KEY": "k", "EVAL_MODE": "true", "FIXGRAPH_CACHE_DIR": str(mirrors / "cache")})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"fixgraph: error: cache_dir {mirrors / 'cache'} is inside the repositories folder {mirrors}: put it elsewhere"]
    assert not (mirrors / "cache").exists()


def _gated(tmp_path: Path, base_url: str, *extra: str,
           timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    from eval.fixtures.repos import make_calc_repo, write_dataset

    mirrors = tmp_path / "mirrors"
    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(mirrors), make_calc_repo(mirrors, name="calc2")])
    t0 = time.monotonic()
    proc = run_graph(["--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--no-progress", *extra],
                     tmp_path, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": base_url, "EVAL_MODE": "true",
                                "FIXGRAPH_CACHE_DIR": str(tmp_path / "cache")}, timeout=timeout)
    return proc, time.monotonic() - t0


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], seconds: float, tmp_path: Path) -> str:
    assert proc.returncode == 2, proc.stderr
    assert seconds < 15, seconds  # starting Python and one refusal; a loaded CI machine is slow at the first
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fixgraph: error: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "predictions").exists() and not (tmp_path / "runs").exists()
    return lines[0]


@pytest.mark.slow
def test_a_closed_port_ends_the_run_before_any_task_with_one_line(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, seconds = _gated(tmp_path, f"http://127.0.0.1:{port}/v1")
    line = _one_line_exit_2(proc, seconds, tmp_path)
    assert f"cannot reach the LLM server at http://127.0.0.1:{port}/v1" in line and "OPENAI_BASE_URL" in line


@pytest.mark.slow
def test_a_refused_key_ends_the_run_before_any_task_with_one_line(tmp_path):
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder

    class Locked(FakeLLMServer):
        def __init__(self) -> None:
            super().__init__(ScriptResponder({}))
            inner = self.handler_cls

            class Handler(inner):  # type: ignore[valid-type,misc]
                def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                    self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})

                do_POST = do_GET  # noqa: N815 - http.server's naming

            self.httpd.RequestHandlerClass = Handler

    with Locked() as srv:
        proc, seconds = _gated(tmp_path, srv.base_url)
    line = _one_line_exit_2(proc, seconds, tmp_path)
    assert "refused the key (GET /models answered 401)" in line and "OPENAI_API_KEY" in line


@pytest.mark.slow
def test_an_unknown_model_ends_the_run_before_any_task_with_one_line(tmp_path):
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder

    class Strict(FakeLLMServer):
        """Serves only the models it lists, as vLLM and OpenAI do: 404 for any other."""

        def handle(self, handler: object, body: dict) -> None:
            if body.get("model") not in self.models:
                handler._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist",  # type: ignore[attr-defined]
                                              "type": "invalid_request_error"}})
                return
            super().handle(handler, body)

    with Strict(ScriptResponder({}), models=("qwen2.5-coder",)) as srv:
        proc, seconds = _gated(tmp_path, srv.base_url, "--model", "no-such-model")
        probes = [r["body"] for r in srv.requests if r["body"] is not None]
    line = _one_line_exit_2(proc, seconds, tmp_path)
    assert "has no model no-such-model (it lists: qwen2.5-coder): pass --model NAME" in line
    assert [b["max_tokens"] for b in probes] == [1]  # one 1-token request, no task's call


@pytest.mark.slow
def test_a_model_served_but_not_listed_passes_the_gate(tmp_path):
    # Ollama serves llama3 as llama3:latest; llama.cpp serves any name: not listed is not unknown.
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
    from fixgraph.config import load_config
    from fixgraph.models.discover import endpoint_gate

    with FakeLLMServer(ScriptResponder({}), models=("llama3:latest",), tools=False) as srv:
        cfg = load_config("baseline", overrides={"llm.base_url": srv.base_url, "llm.models.planner": "llama3"})
        endpoint_gate(cfg)


@pytest.mark.slow
def test_a_batch_where_every_task_failed_on_the_endpoint_exits_non_zero(tmp_path):
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder

    class Broken(FakeLLMServer):
        """Lists its model, then answers every call 503."""

        def handle(self, handler: object, body: dict) -> None:
            handler._send(503, {"error": {"message": "overloaded", "type": "server_error"}},  # type: ignore[attr-defined]
                          headers={"Retry-After": "0"})

    with Broken(ScriptResponder({}), models=("fake",)) as srv:
        proc, _ = _gated(tmp_path, srv.base_url, "--model", "fake", "--config", "baseline", timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "2 failed" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "fixgraph: every task failed the same way (LLM server answered 503)")


def test_only_one_fault_of_the_endpoint_or_machine_on_every_task_makes_the_batch_fail():
    from pipeline.tasks import RunSummary

    def summary(*failed: str) -> RunSummary:
        s = RunSummary(run_id="r")
        for f in failed:
            s.add({"status": "failed" if f else "patched", "failed": f})
        return s

    refused = "cannot reach the LLM server: Connection error."
    assert summary(refused, refused).common_fault() == "cannot reach the LLM server"
    assert summary("LLM server answered 503: overloaded").common_fault() == "LLM server answered 503"
    assert summary(refused, "").common_fault() == ""  # a task got through
    assert summary(refused, "LLM server timed out: 3 call(s) of 120 s each").common_fault() == ""
    assert summary("LLM server answered 400: over the context window").common_fault() == ""  # that request only
    assert summary("no valid Plan from the LLM: invalid: ...").common_fault() == ""  # the model, not the machine
    assert summary().common_fault() == ""
