"""A run of ``python -m eval.run`` killed with SIGKILL mid-task resumes to exactly one prediction per task.

The LLM is a loopback server that answers slowly, so the kill lands while a task is between two
LLM calls, after some tasks have finished. The second invocation must skip the finished tasks
(their .diff, JSONL line and record stay byte-identical), restart the task in flight from its
SQLite checkpoint (its Planner is not asked again), and run the rest.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from fixgraph.config import PROJECT_ROOT
from tests.helpers.eval_run_helpers import (
    SlowServer,
    config_files,
    jsonl_lines,
    llm_env,
    make_tasks,
    responder,
)

pytestmark = pytest.mark.slow

N_TASKS = 3


def tool_calls(server: SlowServer, tool: str) -> int:
    return sum(1 for r in server.requests if (r["body"].get("tools") or [{}])[0].get("function", {}).get("name") == tool)


def finals(records: Path) -> dict[str, str]:
    out = {}
    for path in records.glob("*.json"):
        try:
            rec = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
        if rec.get("final"):
            out[rec["instance_id"]] = path.read_text()
    return out


def planned(db: Path, thread_id: str) -> bool:
    """True once the task's last checkpoint holds the Planner's plan."""
    if not db.is_file():
        return False
    conn = sqlite3.connect(str(db), timeout=5)
    try:
        saved = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": thread_id}})
    except sqlite3.Error:  # the run is creating its tables right now
        return False
    finally:
        conn.close()
    return bool(saved and saved.checkpoint["channel_values"].get("plan"))


@pytest.mark.slow
def test_sigkill_then_resume_gives_one_prediction_per_task(tmp_path: Path) -> None:
    mirrors, dataset, ids = make_tasks(tmp_path, N_TASKS)
    runs = tmp_path / "runs"
    configs = config_files(tmp_path, ["baseline", "static"])
    with SlowServer(responder(), delay=0.4) as server:
        env = {**os.environ, **llm_env(server.base_url), "PYTHONPATH": str(PROJECT_ROOT),
               "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
        cmd = [sys.executable, "-m", "eval.run", "--configs", ",".join(configs), "--tasks", "all",
               "--dataset", str(dataset), "--repos", str(mirrors), "--workers", "1", "--run-prefix", "k",
               "--runs-dir", str(runs), "--no-progress", "--no-harness"]
        records = runs / "k-baseline" / "records"
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 120
            # Two tasks finished and the third's Planner checkpointed (its Explorer is being asked).
            while not (len(finals(records)) >= 2 and planned(runs / "k-baseline" / "checkpoints.sqlite", ids[2])):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the run never got two tasks done"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode == -signal.SIGKILL

        done_before = finals(records)
        preds = runs / "k-baseline" / "predictions"
        assert 2 <= len(done_before) < N_TASKS
        in_flight = [i for i in ids if i not in done_before]
        before = {iid: ((preds / f"{iid}.diff").read_bytes(), jsonl_lines(preds / "k-baseline.jsonl")[iid])
                  for iid in done_before}
        plans_before = tool_calls(server, "Plan")
        server.delay = 0.0  # nothing left to race against


        resumed = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert f"{len(done_before)} already done" in resumed.stdout

    for run_id in ("k-baseline", "k-static"):
        folder = runs / run_id / "predictions"
        lines = jsonl_lines(folder / f"{run_id}.jsonl")  # fails on a duplicate line
        assert sorted(lines) == sorted(ids)
        for iid in ids:
            diff = (folder / f"{iid}.diff").read_text()
            assert json.loads(lines[iid])["model_patch"] == diff and diff.strip()
    # Tasks finished before the kill were skipped: patch, JSONL line and record untouched.
    after_lines = jsonl_lines(preds / "k-baseline.jsonl")
    for iid, (diff, line) in before.items():
        assert (preds / f"{iid}.diff").read_bytes() == diff
        assert after_lines[iid] == line
        assert (records / f"{iid}.json").read_text() == done_before[iid]
    # The task in flight at the kill restarted from its checkpoint: no second Plan for it.
    first = json.loads((records / f"{in_flight[0]}.json").read_text())
    assert first["resumed"] is True and first["final"] is True
    new_plans = tool_calls(server, "Plan") - plans_before
    assert new_plans == (len(in_flight) - 1) + N_TASKS  # the untouched baseline tasks, then every static task
