"""A patch that adds a dependency gets it for its run (scoring/execution/patch_deps.py), as
swebench's harness installs the patched repository again: pylint-4661's gold patch adds appdirs."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval.hidden import run_hidden
from fixgraph import config
from scoring.execution import patch_deps
from scoring.execution.envs import VenvEnvs
from scoring.execution.runner import SubprocessRunner
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, apply_to, calc_instance, diff_for


def make_wheel(folder: Path, name: str, version: str, module: str) -> Path:
    """A pure-Python wheel of one module, written by hand (no build step, no network)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": module.encode(),
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{rel},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
                     for rel, data in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
        zf.writestr(f"{dist}/RECORD", record)
    return path


@pytest.fixture
def wheels() -> Iterator[Path]:
    """A folder pip in the sandbox can read (pytest's own temp folders are closed to other users)."""
    folder = Path(tempfile.mkdtemp(prefix="fixgraph-wheels-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def offline_index(wheels: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip's only index from now on: ``wheels`` with the wheel ``fxdep`` 1.2 (and no network)."""
    make_wheel(wheels, "fxdep", "1.2", "def plus(a, b):\n    return a + b\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def test_what_a_patch_declares_is_read_per_file_and_only_plain_requirements_count(tmp_path: Path) -> None:
    setup_cfg = "[options]\ninstall_requires =\n    astroid>=2.8  # pinned\n    isort\n[flake8]\nmax-line-length = 99\n"
    assert patch_deps.declared("setup.cfg", setup_cfg) == ["astroid>=2.8", "isort"]
    assert patch_deps.declared("pyproject.toml", '[project]\ndependencies = ["a>1", 3]\n') == ["a>1"]
    assert patch_deps.declared("pyproject.toml", "[project\n") == []
    assert patch_deps.declared("requirements.txt", "-r other.txt\n-e .\n# c\nb==1 # why\n--index-url http://x\n") == ["b==1"]
    assert patch_deps.declares("requirements_test.txt") and not patch_deps.declares("docs/requirements.txt")
    assert not patch_deps.declares("setup.py")


@pytest.mark.slow
def test_a_patch_that_adds_a_dependency_gets_it_and_hostile_ones_are_refused(tmp_path: Path, wheels: Path,
                                                                             monkeypatch) -> None:
    index = offline_index(wheels, monkeypatch)
    steps: list[dict[str, Any]] = []
    real = patch_deps.run_isolated

    def step(argv, cwd, env, limits, writable=()):  # noqa: ANN001, ANN202
        steps.append({"limits": limits, "writable": tuple(writable)})
        return real(argv, cwd, env, limits, writable=writable)

    monkeypatch.setattr(patch_deps, "run_isolated", step)
    cfg = "[options]\ninstall_requires =\n    pytest\n"
    inst, wt, _ = calc_instance(tmp_path, files={"setup.cfg": cfg})
    new_cfg = cfg + "    FXDep>=1.0\n    evil @ https://example.invalid/evil.whl\n    pytest>=7\n"
    patch = apply_to(wt, diff_for(tmp_path, "setup.cfg", cfg, new_cfg))
    work = wt.path  # the patched tree
    reqs, notes = patch_deps.added(wt, inst.base_commit, work, patch)
    assert reqs == ["FXDep>=1.0"]  # pytest was declared before; the URL is no plain requirement
    assert notes == ["the patch declares 'evil @ https://example.invalid/evil.whl' in setup.cfg: "
                     "not a plain requirement, not installed"]
    target = tmp_path / "run" / "deps"
    target.parent.mkdir()
    got, said = patch_deps.provide(wt, inst.base_commit, work, patch, sys.executable, target)
    assert got == target and said[-1] == "the patch adds FXDep>=1.0: installed for this run (wheels, no dependencies)"
    out = subprocess.run([sys.executable, "-c", "import fxdep; print(fxdep.plus(2, 3))"], env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True)
    assert out.stdout.strip() == "5", out.stderr
    # pip ran as a build step does: sandboxed, the index its only network, writing only the target
    assert [(c["limits"].network_isolation, c["limits"].index_access, c["writable"]) for c in steps] == [
        (True, True, (target,))]
    # Installed already in the env: nothing to give. No wheel at the index: said, not raised.
    assert patch_deps.missing(sys.executable, ["pytest>=1", "fxdep"], {}) == ["fxdep"]
    for wheel in index.iterdir():
        wheel.unlink()
    got, said = patch_deps.provide(wt, inst.base_commit, work, patch, sys.executable, tmp_path / "run" / "deps2")
    assert got is None and said[-1].startswith("the patch adds FXDep>=1.0: not installed (")


@pytest.mark.slow
def test_the_runner_gives_the_patched_run_its_new_dependency_and_not_the_base_run(tmp_path: Path, wheels: Path,
                                                                                 monkeypatch) -> None:
    spec: dict[str, Any] = {"python": "{}.{}".format(*sys.version_info[:2]), "pip_packages": ["pytest"],
                            "install": "python -m pip install --no-build-isolation -e .", "test_cmd": "pytest -rA"}
    pyproject = CALC_PYPROJECT.replace('version = "0.1"\n', 'version = "0.1"\ndependencies = []\n')
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": pyproject})
    inst = inst.model_copy(update={"version": "0.1"})
    fixed = "import fxdep\n\n" + CALC.replace("return a - b", "return fxdep.plus(a, b)")
    patch = diff_for(tmp_path, "calc.py", CALC, fixed) + diff_for(
        tmp_path, "pyproject.toml", pyproject, pyproject.replace("dependencies = []", 'dependencies = ["fxdep"]'))

    def runner(on: bool) -> SubprocessRunner:
        settings = config.TestSettings(backend="venv", timeout_s=120, patch_dependencies=on)
        envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings,
                        specs=lambda repo, version: spec if repo == inst.repo else None)
        return SubprocessRunner(settings, tmp_path / "cache", envs, "venv")

    base = run_hidden(runner(True), inst, wt, "")  # builds the env (pytest from the index)
    assert base.runnable and base.fail_to_pass == {"tests/test_calc.py::test_add": "FAILED"}, base.reason
    offline_index(wheels, monkeypatch)
    applied = apply_to(wt, patch)
    out = run_hidden(runner(True), inst, wt, applied)
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert set(out.pass_to_pass_after.values()) == {"PASSED"}
    assert "the patch adds fxdep: installed for this run (wheels, no dependencies)" in out.notes
    off = run_hidden(runner(False), inst, wt, applied)
    assert off.fail_to_pass != {"tests/test_calc.py::test_add": "PASSED"}  # ModuleNotFoundError: fxdep
