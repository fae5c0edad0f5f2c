"""Paths enter the sandbox normalised: fixgraph started through a relative interpreter path
(``../venv/bin/python``) still runs a sandboxed test, and that test sees none of the host's
folders beyond the system's and its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from pathlib import Path
from fixgraph.sandbox.process import Limits, run_isolated, sandbox_mode, scrubbed_env
run = Path(sys.argv[1])
(run / "repo").mkdir(parents=True)
(run / "home").mkdir()
(run / "repo" / "probe.py").write_text("import os, sys\\nprint('RAN', os.path.exists(sys.argv[1]))\\n")
done = run_isolated([sys.executable, "-I", "probe.py", sys.argv[2]], run / "repo", scrubbed_env(run / "home"),
                    Limits(30, 30, 1024))
print(sandbox_mode(), done.returncode, done.output.strip())
"""


def test_a_relative_interpreter_path_runs_a_sandboxed_test(tmp_path: Path) -> None:
    start = tmp_path / "start"
    start.mkdir()
    relative = os.path.relpath(sys.executable, start)
    assert relative.startswith("..")
    (tmp_path / "check.py").write_text(SCRIPT)
    proc = subprocess.run([relative, str(tmp_path / "check.py"), str(tmp_path / "run"), str(tmp_path / "check.py")], cwd=start,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    mode, rc, *rest = proc.stdout.split(maxsplit=2)
    assert rc == "0", proc.stdout
    if mode != "none":
        # A file beside its run folder (fixgraph's own script here) is not there for the test.
        assert [r.strip() for r in rest] == ["RAN False"], proc.stdout


def test_a_venv_named_only_by_its_folder_keeps_its_base_installation(tmp_path: Path) -> None:
    """A build step runs ``bash -c "python -m pip install -e ."``: its python (a --copies venv's,
    loading the base's libpython) is reached through PATH and VIRTUAL_ENV, never named."""
    from fixgraph.sandbox.process import _masks

    base, venv = tmp_path / "pyenv" / "3.9", tmp_path / "env" / "venv"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.9").write_text("")
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = false\n")
    _, keep = _masks([Path("/usr/bin/bash")], {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:/usr/bin"})
    assert str(base) in keep and str(venv.parent) in keep


def test_a_venv_whose_python_links_through_a_covered_folder_keeps_each_link(tmp_path: Path) -> None:
    """``python3 -m venv`` run with a ``python3`` that is itself a link (``/opt/bin/python3`` ->
    ``/usr/bin/python3``): the venv's ``python3`` names that link, so it is kept too."""
    from fixgraph.sandbox.process import _masks

    real = Path(os.path.realpath(sys.executable))
    middle, venv = tmp_path / "tools" / "python3", tmp_path / "env" / "venv"
    middle.parent.mkdir(parents=True)
    middle.symlink_to(real)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(middle)
    (venv / "bin" / "python").symlink_to("python3")
    # home names the real interpreter's folder (as a venv made from a folder's top-level link does:
    # its parent is the covered folder itself, which is never kept whole)
    (venv / "pyvenv.cfg").write_text(f"home = {real.parent}\n")
    _, keep = _masks([venv / "bin" / "python"], {})
    assert any(str(middle) == k or str(middle).startswith(k + "/") for k in keep), keep


WATCHED = """
import os, sys, time
from pathlib import Path
from fixgraph.sandbox.process import prepare_workdir
folders = [Path(p) for p in sys.argv[1:]]
for f in folders:
    (f / "inner").mkdir(parents=True)
prepare_workdir(*folders)
print("ready", flush=True)
time.sleep(60)
"""


def test_one_watchdog_removes_a_killed_runs_folders(tmp_path: Path) -> None:
    """fixgraph killed mid-run (no ``finally`` runs): the run's folder and its temp dir apart both go,
    by the one watchdog process started for them."""
    folders = [tmp_path / "run", tmp_path / "tmp-apart"]
    proc = subprocess.Popen([sys.executable, "-c", WATCHED, *map(str, folders)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    watchdogs = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    assert len(watchdogs.stdout.split()) == 1  # one process for both folders
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 15
    while any(f.exists() for f in folders) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(f.exists() for f in folders)
