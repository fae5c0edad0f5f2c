"""A machine without the spec's Python: uv installs a real interpreter from a loopback mirror, the env
is built with it, and the gold patch passes in it.

The mirror serves one of this machine's own installs, packed as python-build-standalone's
``install_only`` archive (eval/fakes/python_mirror.py: libpython relinked into the binary, the
sysconfig paths on uv's placeholder); pyenv is hidden while the env is built and the tests run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval.fakes.python_mirror import Archive, PythonMirror, installs, pack
from eval.hidden import run_hidden
from fixgraph import config
from scoring.execution import interpreters
from scoring.execution.envs import VenvEnvs
from scoring.execution.runner import SubprocessRunner
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, apply_to, calc_instance, diff_for

PYENV_ROOT = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
# A small install of a minor no test venv runs on: what the mirror serves must be the only one.
PACKED = next((xy for xy in ("3.9", "3.10", "3.8") if xy in installs(PYENV_ROOT)), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(interpreters.uv_binary() is None, reason="uv is not installed: pip install uv"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the archive is a linux-x86_64 build"),
    pytest.mark.skipif(PACKED is None, reason=f"no CPython 3.8-3.10 under {PYENV_ROOT}/versions to serve: "
                       "pyenv install 3.9"),
]

# Modules whose extension a shared build links to libpython before 3.8 (through pyenv's folder).
IMPORTS = "import ssl, sqlite3, ctypes, zlib, lzma, bz2, _decimal, json"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[PythonMirror, Archive]]:
    assert PACKED is not None
    archive = pack(installs(PYENV_ROOT)[PACKED], tmp_path / "archives")
    mirror = PythonMirror([archive])
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(mirror.downloads_json(tmp_path / "dl.json")))
    monkeypatch.delenv("UV_PYTHON_INSTALL_MIRROR", raising=False)
    monkeypatch.setenv("PYENV_ROOT", "/nonexistent")
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(interpreters, "_failed", {})
    monkeypatch.setattr(interpreters, "_offered", {})
    yield mirror, archive
    mirror.close()


def test_the_env_is_built_with_the_interpreter_uv_installs_and_the_gold_patch_passes(
        served: tuple[PythonMirror, Archive], tmp_path: Path) -> None:
    mirror, archive = served
    assert interpreters.version_tuple(archive.xy) not in interpreters.machine_pythons(tmp_path / "cache")
    spec = {"python": archive.xy, "pip_packages": ["pytest"],
            "install": "python -m pip install --no-build-isolation -e .", "test_cmd": "pytest -rA"}
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": CALC_PYPROJECT})
    inst = inst.model_copy(update={"version": "0.1"})
    settings = config.TestSettings(backend="venv", timeout_s=120)
    envs = VenvEnvs(tmp_path / "cache" / "envs", tmp_path / "cache", settings,
                    specs=lambda repo, version: spec if repo == inst.repo else None)
    runner = SubprocessRunner(settings, tmp_path / "cache", envs, "venv")

    gold = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a + b")))
    out = run_hidden(runner, inst, wt, gold)
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert set(out.pass_to_pass_after.values()) == {"PASSED"}

    meta = json.loads((envs.env_path(inst.task()) / "env.json").read_text())
    assert (meta["ok"], meta["python_how"], meta["python_version"]) == (True, "provisioned", archive.xy)
    assert Path(meta["python"]).is_relative_to(tmp_path / "cache" / interpreters.PYTHONS_DIR)
    assert mirror.asked == [f"/{archive.path.name}"]
    # the env's interpreter is the installed archive's, and nothing it loads comes from the packed folder
    packed_from = str(installs(PYENV_ROOT)[archive.xy])
    probe = (f"{IMPORTS}; import sys, os; print(tuple(sys.version_info[:3])); print(os.path.realpath(sys.base_prefix)); "
             f"print([m.split()[-1] for m in open('/proc/self/maps') if {packed_from!r} in m])")
    ran = subprocess.run([str(envs.env_path(inst.task()) / "venv" / "bin" / "python"), "-c", probe],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [str(archive.version), str(Path(meta["python"]).parent.parent.resolve()), "[]"]
