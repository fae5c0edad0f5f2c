"""Attacks from bad input to graph.py: one line, exit 2, nothing half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from eval.attacks import ATTACKS, ROOT, Attack, attack
from eval.attacks.sandbox import _mirror

# ---- the command line ------------------------------------------------------------------------


def _graph(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE", "GITHUB"))}
    base.update({"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "EVAL_MODE": "true",
                 "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"},
                **(env or {}))
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), "--no-progress", *args], cwd=tmp, env=base,
                          capture_output=True, text=True, timeout=120)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *, expect: str = "") -> str:
    lines = proc.stderr.strip().splitlines()
    if proc.returncode != 2 or len(lines) != 1 or "Traceback" in proc.stderr:
        return f"exit {proc.returncode}, stderr {proc.stderr.strip()[-300:]!r}"
    return "" if expect in lines[0] else f"said {lines[0]!r}"


def _dataset(tmp: Path, mirrors: Path, sha: str, instance_id: str = "acme__calc-1") -> Path:
    path = tmp / "ds.jsonl"
    path.write_text(json.dumps({"instance_id": instance_id, "repo": "acme/calc", "base_commit": sha,
                                "problem_statement": "add subtracts", "version": "0.1",
                                "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}) + "\n")
    return path


def _nothing_written(tmp: Path) -> str:
    made = [p.name for p in (tmp / "predictions", tmp / "runs", tmp / ".cache") if p.exists()]
    made += [p.name for p in tmp.glob("x*")]
    return f"; created {made}" if made else ""


@attack("cli-input", "instance_id with ../ in the dataset")
def _bad_instance_id(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha, instance_id="../../xescape")
    proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors))
    return (_one_line_exit_2(proc, expect="instance_id") + _nothing_written(tmp)
            + ("; wrote outside" if list(tmp.parent.glob("xescape*")) else ""))


@attack("cli-input", "--run-id ../../x")
def _bad_run_id(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--run-id", "../../xrun")
    return _one_line_exit_2(proc, expect="--run-id") + _nothing_written(tmp)


@attack("cli-input", "a config file with non-UTF-8 bytes")
def _non_utf8_config(tmp: Path) -> str:
    cfg = tmp / "bad.toml"
    cfg.write_bytes(b'name = "caf\xe9"\n')
    return _one_line_exit_2(_graph(tmp, "--config", str(cfg)), expect="UTF-8") + _nothing_written(tmp)


@attack("cli-input", "output folders under a regular file")
def _dirs_under_file(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    (tmp / "afile").write_text("not a folder")
    cfg = tmp / "c.toml"
    cfg.write_text(f'predictions_dir = "{tmp / "afile" / "preds"}"\n' + (ROOT / "configs" / "redo.toml").read_text())
    proc = _graph(tmp, "--config", str(cfg), "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors))
    return _one_line_exit_2(proc, expect="not a folder") + _nothing_written(tmp)


@attack("cli-input", "a repository with no mirror, a corrupt mirror, a missing base commit")
def _bad_mirrors(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    problems = []
    empty = tmp / "empty-mirrors"
    empty.mkdir()
    cases = {"no mirror": (empty, sha, "no mirror"), "missing commit": (mirrors, "1" * 40, "no commit")}
    for label, (where, commit, expect) in cases.items():
        ds = _dataset(tmp, where, commit)
        problem = _one_line_exit_2(_graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(where)),
                                   expect=expect) + _nothing_written(tmp)
        if problem:
            problems.append(f"{label}: {problem}")
    corrupt = tmp / "corrupt-mirrors" / "acme+calc"
    corrupt.mkdir(parents=True)
    (corrupt / "HEAD").write_text("garbage\n")
    ds = _dataset(tmp, corrupt.parent, sha)
    problem = _one_line_exit_2(_graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(corrupt.parent)),
                               expect="not a usable git repository") + _nothing_written(tmp)
    if problem:
        problems.append(f"corrupt: {problem}")
    return "; ".join(problems)


@attack("run-lock", "a second graph.py with the same run id")
def _same_run_id(tmp: Path) -> str:
    from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
    from fixgraph.records import RunLock

    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    lock = RunLock(tmp / "runs" / "shared")  # the first run, in progress
    try:
        # An endpoint that answers, so the second run gets as far as the lock.
        with FakeLLMServer(ScriptResponder({}), models=("gpt-4o-mini",)) as srv:
            proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--run-id", "shared",
                          env={"OPENAI_BASE_URL": srv.base_url})
    finally:
        lock.release()
    records = list((tmp / "runs" / "shared").rglob("*.json"))
    return _one_line_exit_2(proc, expect="in progress") + (f"; wrote {records}" if records else "")




# ---- more bad input, each one line and exit 2 ----------------------------------------------


def _config_with(tmp: Path, line: str) -> Path:
    cfg = tmp / "c.toml"
    cfg.write_text(line + "\n" + (ROOT / "configs" / "redo.toml").read_text())
    return cfg


def _run_with_config(tmp: Path, line: str, expect: str, env: dict[str, str] | None = None) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    proc = _graph(tmp, "--config", str(_config_with(tmp, line)), "--tasks", "all", "--dataset", str(ds),
                  "--repos", str(mirrors), env=env)
    return _one_line_exit_2(proc, expect=expect) + _nothing_written(tmp)


@attack("cli-input", "predictions_dir under /proc")
def _predictions_in_proc(tmp: Path) -> str:
    return _run_with_config(tmp, 'predictions_dir = "/proc/fixgraph-bench/preds"', "cannot create")


@attack("cli-input", "runs_dir under /sys")
def _runs_in_sys(tmp: Path) -> str:
    return _run_with_config(tmp, 'runs_dir = "/sys/fixgraph-bench/runs"', "cannot create")


@attack("cli-input", "predictions_dir under a read-only /proc/self folder")
def _predictions_in_proc_self(tmp: Path) -> str:
    return _run_with_config(tmp, 'predictions_dir = "/proc/self/fdinfo/preds"', "cannot create")


def _bad_flag(*args: str, expect: str) -> Callable[[Path], str]:
    def run(tmp: Path) -> str:
        return _one_line_exit_2(_graph(tmp, *args), expect=expect) + _nothing_written(tmp)
    return run


for _args, _expect in ((("--workers", "abc"), "--workers"), (("--workers", "1.5"), "--workers"),
                       (("--workers", "0"), "--workers"), (("--workers", "-3"), "--workers"),
                       (("--executor", "kubernetes"), "--executor"), (("--frobnicate",), "--frobnicate"),
                       (("--tasks",), "--tasks"), (("--ray-address", "127.0.0.1:6379"), "--executor ray")):
    ATTACKS.append(Attack("cli-input", f"graph.py {' '.join(_args)}", _bad_flag(*_args, expect=_expect)))


@attack("cli-input", "--repos names a regular file")
def _repos_is_file(tmp: Path) -> str:
    (tmp / "afile").write_text("x")
    return _one_line_exit_2(_graph(tmp, "--repos", str(tmp / "afile")), expect="not a folder") + _nothing_written(tmp)


@attack("cli-input", "--config names a missing TOML file")
def _missing_config(tmp: Path) -> str:
    return _one_line_exit_2(_graph(tmp, "--config", str(tmp / "nope.toml")), expect="config") + _nothing_written(tmp)
