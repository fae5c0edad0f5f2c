"""``python graph.py --check --repo DIR``: the env inferred for a local checkout, built, and its
tests run at HEAD; bad input is one line and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.fixtures.service_repo import service_files
from tests.helpers.testrun_helpers import CALC, MINOR, TEST_FILE, make_repo, pinned_pyproject

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = pinned_pyproject("""[tool.setuptools]
py-modules = ["calc"]

[tool.pytest.ini_options]
addopts = "-q"
""")


def _graph(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
    config = tmp_path / "venv.toml"
    config.write_text(f'name = "venv"\ncache_dir = "{tmp_path / "cache"}"\n\n[tests]\nbackend = "venv"\ntimeout_s = 120\n')
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), "--config", str(config), *args], cwd=tmp_path,
                          env={**env, "FIXGRAPH_LOCAL_SERVERS": ""}, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_check_repo_shows_the_inferred_env_builds_it_and_runs_the_tests_at_head(tmp_path: Path) -> None:
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": TEST_FILE, "pyproject.toml": PYPROJECT})
    proc = _graph(["--check", "--repo", str(mirrors / "fixture+calc")], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"at {commit[:12]}" in out and f"python {MINOR} (requires-python)" in out
    assert "tests (pytest config): pytest -rA" in out and "env built" in out
    assert "10 passed" in out and "= 1.00" in out


@pytest.mark.parametrize("args, message", [
    (["--check", "--repo", "nowhere"], "nowhere is not a directory"),
    (["--repo", "."], "--repo goes with --check"),
])
def test_bad_repo_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _graph(args, tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_a_folder_that_is_no_git_checkout_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    proc = _graph(["--check", "--repo", str(tmp_path / "plain")], tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "plain" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_check_repo_starts_the_declared_service_and_a_missing_one_is_its_last_line(tmp_path: Path) -> None:
    files = {"calc.py": CALC, "tests/test_calc.py": TEST_FILE, "pyproject.toml": PYPROJECT, **service_files()}
    mirrors, _ = make_repo(tmp_path / "up", files)
    proc = _graph(["--check", "--repo", str(mirrors / "fixture+calc")], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "services started for the tests: upper (`python services/upper_server.py {port}`" in proc.stdout
    assert "  service upper started on 127.0.0.1:" in proc.stdout and "10 passed" in proc.stdout
    # The same checkout declaring a server this machine lacks: the same env, no test run, one line why.
    table = 'services = [{name = "upper", command = "upper-server {port}"}]\n'
    mirrors, _ = make_repo(tmp_path / "missing", {**files, **service_files(table)})
    proc = _graph(["--check", "--repo", str(mirrors / "fixture+calc")], tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "  not runnable: service upper not started: upper-server is not on the env's or the machine's PATH")
