"""What a machine that cannot build a task's env gets, end to end through graph.py: the run says
so before its first LLM call, stops when no task can run its tests, and with --require-tests a
task no test ran on fails without a .diff. And ``--prepare`` killed midway: the next call resumes,
the half-built env is never used, and a call after that only reads records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fixtures.repos import calc_script, make_calc_repo, write_dataset

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QHULL = "building offline needs Debian's"


def _graph(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
    base.update({"FIXGRAPH_LOCAL_SERVERS": "", **env})
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), *args], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=timeout)


def _no_qhull(tmp_path: Path) -> dict[str, str]:
    """pkg-config finds nothing: the machine as one without libqhull-dev and libfreetype-dev."""
    (tmp_path / "no-pc").mkdir(exist_ok=True)
    return {"PKG_CONFIG_PATH": "", "PKG_CONFIG_LIBDIR": str(tmp_path / "no-pc")}


def _matplotlib_like(root: Path) -> dict[str, Any]:
    """The calc fixture under matplotlib's name and a version whose build needs Qhull and FreeType."""
    return {**make_calc_repo(root, "matplotlib", "matplotlib"), "version": "3.6"}


def _diffs(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*.diff") if "mirrors" not in p.parts]


def test_a_set_whose_envs_all_fail_stops_before_the_first_llm_call(tmp_path: Path) -> None:
    ds = write_dataset(tmp_path / "ds.jsonl", [_matplotlib_like(tmp_path / "mirrors")])
    with FakeLLMServer(ScriptResponder(calc_script(first_attempt_broken=False)), models=("gpt-4o-mini",)) as srv:
        t0 = time.monotonic()
        proc = _graph(["--tasks", "all", "--dataset", str(ds), "--repos", str(tmp_path / "mirrors"), "--no-progress"],
                      tmp_path, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url, "EVAL_MODE": "true",
                                 **_no_qhull(tmp_path)})
        seconds = time.monotonic() - t0
        posts = [r["body"] for r in srv.requests if r["body"] is not None]
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("fixgraph: error: no task of this set can run its tests on this machine")
    assert QHULL in lines[0] and "apt-get install" in lines[0] and "libqhull-dev" in lines[0]
    assert all(b.get("max_tokens") == 1 for b in posts)  # the endpoint's probe only: no task's call
    assert not _diffs(tmp_path) and seconds < 60


@pytest.mark.timeout(900)  # the calc task builds its inferred env and runs its tests
def test_with_require_tests_a_task_no_test_ran_on_fails_without_a_diff(tmp_path: Path) -> None:
    """Two tasks: one the machine cannot build (said before the first LLM call), one of a
    repository without install specs (its env inferred from its files: it runs its tests)."""
    mirrors = tmp_path / "mirrors"
    ds = write_dataset(tmp_path / "ds.jsonl", [_matplotlib_like(mirrors), make_calc_repo(mirrors)])
    with FakeLLMServer(ScriptResponder(calc_script(first_attempt_broken=False)), models=("gpt-4o-mini",)) as srv:
        proc = _graph(["--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--no-progress",
                       "--require-tests", "--run-id", "rt"],
                      tmp_path, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": srv.base_url, "EVAL_MODE": "true",
                                 **_no_qhull(tmp_path)})
        calls = [r["body"] for r in srv.requests if r["body"] is not None and r["body"].get("max_tokens") != 1]
    assert "Traceback" not in proc.stderr, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "will fail (--require-tests)" in ln]
    assert len(said) == 1 and said[0].startswith("fixgraph: 1 of 2 tasks will fail (--require-tests): ")
    assert "matplotlib/matplotlib 3.6: " + QHULL in said[0]
    task_lines = [proc.stderr.find(i) for i in ("fixture__calc-1", "matplotlib__matplotlib-1") if i in proc.stderr]
    assert task_lines and proc.stderr.index(said[0]) < min(task_lines)  # before any task's event line
    assert calls  # the tasks did run the graph
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "runs" / "rt").rglob("*.json")
               if p.stem in ("matplotlib__matplotlib-1", "fixture__calc-1")}
    mpl = records.get("matplotlib__matplotlib-1")
    assert mpl is not None and mpl.get("status") == "failed", records.keys()
    assert "require_tests: no test ran on the patch" in json.dumps(mpl)
    assert all(p.stem == "fixture__calc-1" for p in _diffs(tmp_path))


PREPARE = """
import sys
from pathlib import Path
from fixgraph.config import load_config
from fixgraph.dataset import load_jsonl
from scoring.execution import envs, readiness
from pipeline.prepare import run_prepare
ds, mirrors, cache, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
spec = {"python": "%d.%d" % sys.version_info[:2], "test_cmd": "pytest -rA",
        "install": "sleep 300" if mode == "slow" else "true"}
envs.repo_specs = readiness.repo_specs = lambda cache_dir, repo, version: spec
cfg = load_config("redo", env={}, overrides={"cache_dir": cache})
sys.exit(run_prepare([i.task() for i in load_jsonl(ds)], cfg, mirrors, 1, False))
"""


def test_a_prepare_killed_midway_resumes_and_its_half_built_env_is_never_used(tmp_path: Path) -> None:
    mirrors, cache = tmp_path / "mirrors", tmp_path / "cache"
    inst = make_calc_repo(mirrors)
    ds = write_dataset(tmp_path / "ds.jsonl", [inst])
    (tmp_path / "prepare.py").write_text(PREPARE)
    env_dir = cache / "envs" / "fixture+calc__0.1"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def call(mode: str, **kw: Any) -> Any:
        argv = [sys.executable, str(tmp_path / "prepare.py"), str(ds), str(mirrors), str(cache), mode]
        return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, **kw)

    first = call("slow", start_new_session=True)
    deadline = time.monotonic() + 300
    while not (env_dir / "venv" / "bin" / "python").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)  # into the build's next steps
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert (env_dir / "venv").is_dir() and not (env_dir / "env.json").exists()  # half built, no record

    out = call("quick").communicate(timeout=600)[0]
    meta = json.loads((env_dir / "env.json").read_text())
    assert meta["ok"] and meta["build_tries"] == 1, out
    row = next(ln for ln in out.splitlines() if ln.startswith("fixture/calc 0.1"))
    assert row.split()[4] == "built" and "1 of 1 envs ready for 1 tasks" in out

    # Only the record is read: with the mirror gone (so no checkout could be made) the env is built.
    mirrors.rename(tmp_path / "mirrors-gone")
    mirrors.mkdir()
    t0 = time.monotonic()
    again = call("quick").communicate(timeout=120)[0]
    assert time.monotonic() - t0 < 30 and "1 of 1 envs ready" in again, again
    assert json.loads((env_dir / "env.json").read_text())["build_id"] == meta["build_id"]  # read, not rebuilt
