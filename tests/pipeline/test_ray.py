"""--executor ray on a real local Ray (2 CPUs), with the scripted LLM server: same records and
predictions as the thread pool, a killed worker loses and duplicates nothing, the run cap holds,
and bad input ends with one line.

One Ray session serves the module (starting Ray costs seconds); the CLI tests that need their own
driver start their own.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from eval.fakes.faulty_llm_server import FaultyLLMServer
from eval.fault_bench import BenchResponder, came_through, make_bench_repos, task_tag
from fixgraph.config import RunConfig
from fixgraph.dataset import Instance
from pipeline.executors import RayExecutor
from tests.conftest import make_config
from tests.helpers.run_graph import run_tasks

ROOT = Path(__file__).resolve().parents[2]
# Every test that starts Ray runs on one xdist worker (--dist loadgroup): two local clusters started
# at once on a machine with no ~/.ray/auth_token each write a new token there, and the first
# cluster's processes then hang on the second's (a fresh CI machine: the suite stopped at 82%).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

VOLATILE = {"seconds", "started_at", "finished_at", "worker", "run_id"}


@pytest.fixture(scope="module")
def executor():
    """One Ray for the module; RayExecutor finds it initialised and leaves it running."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    ex = RayExecutor.start(RunConfig())
    yield ex
    ex.close()
    ray.shutdown()


def _tasks(root: Path, n: int) -> tuple[Path, list[Instance], BenchResponder, Path]:
    raw, specs = make_bench_repos(root / "mirrors", n)
    dataset = root / "tasks.jsonl"
    dataset.write_text("".join(json.dumps(i) + "\n" for i in raw))
    return root / "mirrors", [Instance.model_validate(i) for i in raw], BenchResponder(specs), dataset


def _cfg(root: Path, base_url: str, **overrides: Any) -> RunConfig:
    # The Critic's two LLM calls on, pyright and the instance's tests off: quick tasks that still
    # exercise every node and publish a patch.
    return make_config(root, "redo", **{"llm.base_url": base_url, "critic.static": False, "critic.tests": False,
                                        **overrides})


def _records(cfg: RunConfig, run_id: str) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((cfg.runs_dir / run_id / "records").glob("*.json"))}


def _predictions(cfg: RunConfig, run_id: str) -> list[dict[str, Any]]:
    path = cfg.predictions_dir / f"{run_id}.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.is_file() else []


def _stable(value: Any, root: Path) -> Any:
    """A record without what differs between two runs of the same task (times, the worker, the folder)."""
    if isinstance(value, dict):
        return {k: _stable(v, root) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v, root) for v in value]
    return value.replace(str(root), "ROOT") if isinstance(value, str) else value


def _ray_tasks_of(pid: int, prefix: str = "ray::fixgraph:") -> dict[int, str]:
    """Ray worker processes under ``pid`` (ours only) running a fixgraph task: pid -> title."""
    children: dict[int, list[int]] = {}
    titles: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            title = (stat.parent / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
        titles[int(stat.parent.name)] = title.strip()
    found, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if titles.get(p, "").startswith(prefix):
            found[p] = titles[p]
        todo += children.get(p, [])
    return found


@pytest.mark.slow
def test_twenty_tasks_on_ray_give_the_thread_pools_records_and_predictions(executor, tmp_path):
    mirrors, insts, responder, _ = _tasks(tmp_path, 20)
    with FaultyLLMServer(responder, tag=task_tag) as srv:
        threads = _cfg(tmp_path / "threads", srv.base_url)
        on_ray = _cfg(tmp_path / "ray", srv.base_url)
        by_threads = run_tasks(insts, threads, run_id="r", repos=mirrors, workers=2, progress=False)
        by_ray = run_tasks(insts, on_ray, run_id="r", repos=mirrors, progress=False,
                           executor=executor)
    assert by_threads.finished == by_ray.finished == 20 and by_ray.patched == by_threads.patched > 0
    assert (by_ray.tokens, round(by_ray.dollars, 9)) == (by_threads.tokens, round(by_threads.dollars, 9))
    recs_t, recs_r = _records(threads, "r"), _records(on_ray, "r")
    assert sorted(recs_r) == sorted(i.instance_id for i in insts)
    assert {k: _stable(v, tmp_path / "threads") for k, v in recs_t.items()} == \
        {k: _stable(v, tmp_path / "ray") for k, v in recs_r.items()}
    assert all(r["worker"]["pid"] != os.getpid() for r in recs_r.values())  # they really ran elsewhere
    preds_t, preds_r = _predictions(threads, "r"), _predictions(on_ray, "r")
    assert len(preds_r) == len({p["instance_id"] for p in preds_r}) == by_ray.patched
    assert sorted(map(json.dumps, preds_r)) == sorted(map(json.dumps, preds_t))
    for p in preds_r:
        assert (on_ray.predictions_dir / f"{p['instance_id']}.diff").read_text() == p["model_patch"]
    # A rerun finds everything done.
    again = run_tasks(insts, on_ray, run_id="r", repos=mirrors, progress=False, executor=executor)
    assert (again.skipped, again.finished) == (20, 0)


@pytest.mark.slow
def test_a_worker_killed_mid_task_is_rerun_from_its_checkpoint_and_nothing_is_lost_or_doubled(
        executor, tmp_path):
    mirrors, insts, responder, _ = _tasks(tmp_path, 4)
    victim = insts[1].instance_id
    blocked, release = threading.Event(), threading.Event()
    codes: list[str] = []

    def hold_first_code(tool: str, body: dict[str, Any]) -> dict[str, Any]:
        tag = task_tag(body)
        if tool == "CodeChange" and tag == victim:
            codes.append(tag)
            if len(codes) == 1:  # the victim's worker is in the middle of its Coder call
                blocked.set()
                release.wait(60)
        return responder(tool, body)

    killed: list[int] = []

    def killer() -> None:
        if blocked.wait(120):
            found = [p for p, title in _ray_tasks_of(os.getpid()).items() if title == f"ray::fixgraph:{victim}"]
            for pid in found:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        release.set()

    with FaultyLLMServer(hold_first_code, tag=task_tag) as srv:
        cfg = _cfg(tmp_path, srv.base_url)
        watcher = threading.Thread(target=killer, daemon=True)
        watcher.start()
        summary = run_tasks(insts, cfg, run_id="k", repos=mirrors, progress=False, executor=executor)
        watcher.join(5)
        plans = [e["tag"] for e in srv.log if e["key"].startswith("Plan")]
    assert len(killed) == 1
    recs = _records(cfg, "k")
    assert sorted(recs) == sorted(i.instance_id for i in insts) and summary.finished == 4
    assert all(r["final"] and came_through(r) for r in recs.values())
    # Rerun by Ray on a new worker, from the checkpoint: the Planner was not asked again.
    assert recs[victim]["resumed"] and recs[victim]["worker"]["pid"] != killed[0]
    assert plans.count(victim) == 1 and len(codes) == 2
    preds = _predictions(cfg, "k")
    assert sorted(p["instance_id"] for p in preds) == sorted(i.instance_id for i in insts)
    assert "return x * 3\n" in next(p["model_patch"] for p in preds if p["instance_id"] == victim)


def test_a_task_whose_worker_dies_on_every_try_gets_one_failed_record(executor, tmp_path):
    mirrors, insts, responder, _ = _tasks(tmp_path, 1)
    iid = insts[0].instance_id
    blocked, release = threading.Event(), threading.Event()

    def hold_the_plan(tool: str, body: dict[str, Any]) -> dict[str, Any]:
        blocked.set()
        release.wait(60)  # the worker is killed meanwhile
        return responder(tool, body)

    def killer() -> None:
        if blocked.wait(60):
            for pid, title in _ray_tasks_of(os.getpid()).items():
                if title == f"ray::fixgraph:{iid}":
                    os.kill(pid, signal.SIGKILL)
        release.set()

    with FaultyLLMServer(hold_the_plan, tag=task_tag) as srv:
        cfg = _cfg(tmp_path, srv.base_url, **{"executor.max_retries": 0})
        threading.Thread(target=killer, daemon=True).start()
        summary = run_tasks(insts, cfg, run_id="d", repos=mirrors, progress=False, executor=executor)
    rec = _records(cfg, "d")[iid]
    assert summary.failed == 1 and rec["final"] and rec["status"] == "failed"
    assert rec["failed"] == "its Ray worker died on each of 1 tries (WorkerCrashedError)"
    assert not _predictions(cfg, "d")


@pytest.mark.slow
def test_the_run_dollar_cap_holds_across_workers(executor, tmp_path):
    mirrors, insts, responder, _ = _tasks(tmp_path, 8)
    with FaultyLLMServer(responder, tag=task_tag) as srv:
        # A task here costs about $0.0007 (Planner, Explorer, Critic on gpt-4o-mini, Coder on gpt-4o).
        cfg = _cfg(tmp_path, srv.base_url, **{"budget.run_dollars": 0.002})
        summary = run_tasks(insts, cfg, run_id="c", repos=mirrors, progress=False, executor=executor)
        at_cap = _records(cfg, "c")
        dearest = max((e["usage"][0] * 2.5 + e["usage"][1] * 10.0) / 1e6 for e in srv.log if e["usage"])
        more = _cfg(tmp_path, srv.base_url, **{"budget.run_dollars": 1.0})
        rest = run_tasks(insts, more, run_id="c", repos=mirrors, progress=False, executor=executor)
    spent = sum(r["billed"]["dollars"] for r in at_cap.values())
    slots = executor._slots(cfg)
    assert slots == 2 and 0 < len(at_cap) < 8 and summary.finished == len(at_cap)
    # Over the cap by at most one call per task in flight: what one machine with 2 workers allows.
    assert 0.002 <= spent <= 0.002 + slots * dearest
    assert all(r["final"] or r["stop_reason"].startswith("budget: run dollar budget spent") for r in at_cap.values())
    assert rest.skipped + rest.finished == 8
    recs = _records(cfg, "c")
    assert len(recs) == 8 and all(r["final"] and came_through(r) for r in recs.values())
    preds = _predictions(cfg, "c")
    assert sorted(p["instance_id"] for p in preds) == sorted(i.instance_id for i in insts)


def test_a_worker_without_the_repo_mirror_says_so_in_the_task_record(executor, tmp_path):
    _, insts, responder, _ = _tasks(tmp_path, 1)
    empty = tmp_path / "no-mirrors"
    empty.mkdir()
    with FaultyLLMServer(responder, tag=task_tag) as srv:
        cfg = _cfg(tmp_path, srv.base_url)
        summary = run_tasks(insts, cfg, run_id="m", repos=empty, progress=False, executor=executor)
    rec = _records(cfg, "m")[insts[0].instance_id]
    assert summary.failed == 1 and rec["final"] and rec["status"] == "failed"
    assert rec["failed"] == f"cannot clone bench/lib0: no mirror of it under {empty}"
    assert rec["worker"]["node"] and not _predictions(cfg, "m")


def _graph(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE", "RAY_"))}
    env.update(OPENAI_API_KEY="k", EVAL_MODE="true", **extra)
    return env


def test_without_ray_installed_one_line_names_the_extra(tmp_path):
    from eval.fixtures.repos import make_calc_repo, write_dataset

    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named \'ray\'")\n')
    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(tmp_path / "m")])
    env = _env(PYTHONPATH=f"{tmp_path / 'noray'}{os.pathsep}{ROOT}")
    proc = _graph(["--tasks", "all", "--dataset", str(ds), "--executor", "ray", "--config", "baseline"], tmp_path, env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        'fixgraph: error: --executor ray needs Ray, which is not installed: pip install -e ".[ray]"']
    assert not (tmp_path / "runs").exists()


def test_an_address_that_does_not_answer_fails_in_seconds_with_one_line(tmp_path):
    from eval.fixtures.repos import make_calc_repo, write_dataset

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(tmp_path / "m")])
    t0 = time.monotonic()
    proc = _graph(["--tasks", "all", "--dataset", str(ds), "--executor", "ray", "--ray-address",
                   f"127.0.0.1:{port}", "--config", "baseline"], tmp_path, _env(PYTHONPATH=str(ROOT)))
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fixgraph: error: cannot reach a Ray cluster at 127.0.0.1:{port}")
    assert not (tmp_path / "runs").exists()
    proc = _graph(["--ray-address", "127.0.0.1:1", "--config", "baseline"], tmp_path, _env(PYTHONPATH=str(ROOT)))
    assert proc.returncode == 2 and proc.stderr.strip() == "fixgraph: error: --ray-address needs --executor ray"


@pytest.mark.slow
def test_ctrl_c_on_the_driver_cancels_the_workers_tasks_and_keeps_finished_work(tmp_path):
    from eval.fakes.llm_server import FakeLLMServer

    mirrors, insts, responder, dataset = _tasks(tmp_path, 3)
    release = threading.Event()
    codes: list[str] = []

    def hang_after_the_first(tool: str, body: dict[str, Any]) -> dict[str, Any]:
        if tool == "CodeChange":
            codes.append(task_tag(body))
            if len(codes) > 1:  # every task after the first hangs in its Coder call
                release.wait(60)
        return responder(tool, body)

    config = tmp_path / "cc.toml"
    config.write_text(f'name = "cc"\ncache_dir = "{tmp_path}/cache"\npredictions_dir = "{tmp_path}/predictions"\n'
                      f'runs_dir = "{tmp_path}/runs"\n[critic]\nenabled = false\n[executor]\nlocal_cpus = 2\n')
    args = ["--tasks", "all", "--dataset", str(dataset), "--repos", str(mirrors), "--config", str(config),
            "--run-id", "cc", "--executor", "ray", "--workers", "2", "--no-progress"]
    records = tmp_path / "runs" / "cc" / "records"
    with FakeLLMServer(hang_after_the_first) as srv:
        env = _env(OPENAI_BASE_URL=srv.base_url, PYTHONPATH=str(ROOT))
        # A shell's background job ignores SIGINT, and its children inherit that: give the driver
        # Python's usual Ctrl-C whatever pytest was started from.
        proc = subprocess.Popen([sys.executable, str(ROOT / "graph.py"), *args], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # Ray's start-up on two loaded cores (the rest of the suite beside it) can take minutes.
        deadline = time.monotonic() + 180
        while ((len(codes) < 3 or not list(records.glob("*.json"))) and time.monotonic() < deadline
               and proc.poll() is None):
            time.sleep(0.1)
        if len(codes) < 3:
            proc.kill()
            _, early = proc.communicate(timeout=60)
            raise AssertionError(f"the tasks never reached their Coder ({len(codes)} of 3; "
                                 f"driver exit {proc.returncode}): {early[-2000:]}")
        hung = _ray_tasks_of(proc.pid)
        assert len(hung) == 2
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        release.set()
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        assert not [p for p in hung if Path(f"/proc/{p}").exists()]  # the workers' tasks are gone
        done = sorted(p.stem for p in records.glob("*.json"))
        assert done == [codes[0]]
        first = (tmp_path / "predictions" / f"{codes[0]}.diff").read_bytes()
        # The thread pool resumes the run as well (the same files, the same checkpoints); a second
        # Ray start would only cost time here.
        again = _graph([a for a in args if a not in ("--executor", "ray")], tmp_path, env)
    assert again.returncode == 0, again.stderr
    assert "1 already done" in again.stdout
    assert sorted(p.stem for p in records.glob("*.json")) == sorted(i.instance_id for i in insts)
    assert (tmp_path / "predictions" / f"{codes[0]}.diff").read_bytes() == first
    lines = (tmp_path / "predictions" / "cc.jsonl").read_text().splitlines()
    assert sorted(json.loads(ln)["instance_id"] for ln in lines) == sorted(i.instance_id for i in insts)
