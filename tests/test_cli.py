"""graph.py's command line: bad input fails fast with one line and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_graph(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 60):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
    base.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), *args], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=timeout)


def test_no_api_key_fails_in_seconds_naming_the_setting(tmp_path):
    t0 = time.monotonic()
    proc = run_graph(["--tasks", "stratified50"], tmp_path, {"EVAL_MODE": "true"})
    assert time.monotonic() - t0 < 20
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0]
    assert not (tmp_path / "predictions").exists() or not any((tmp_path / "predictions").iterdir())


def test_unknown_task_id(tmp_path, calc):
    from eval.fixtures import make_calc_repo, write_dataset

    ds = write_dataset(tmp_path / "ds.jsonl", [make_calc_repo(tmp_path / "m2")])
    proc = run_graph(["--tasks", "nope__nope-1", "--dataset", str(ds)], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["fixgraph: error: unknown task id 'nope__nope-1': not in the dataset"]
    assert not (tmp_path / "predictions").exists() or not any((tmp_path / "predictions").iterdir())


def test_malformed_jsonl_line(tmp_path):
    ds = tmp_path / "bad.jsonl"
    ds.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "x", "problem_statement": "p"}\n{not json\n')
    proc = run_graph(["--tasks", "all", "--dataset", str(ds)], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2
    msg = proc.stderr.strip().splitlines()
    assert len(msg) == 1 and "bad.jsonl:2: malformed JSON line" in msg[0]
    assert "Traceback" not in proc.stderr


def test_unknown_config_and_bad_eval_mode(tmp_path):
    proc = run_graph(["--config", "nosuch"], tmp_path, {"OPENAI_API_KEY": "k"})
    assert proc.returncode == 2 and "unknown config 'nosuch'" in proc.stderr
    proc = run_graph([], tmp_path, {"OPENAI_API_KEY": "k", "EVAL_MODE": "maybe"})
    assert proc.returncode == 2 and "EVAL_MODE must be true or false" in proc.stderr
