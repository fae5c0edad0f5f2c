"""An env's install at one base commit serves another commit of the same (repo, version) when nothing
the install reads changed between them: a row no longer pays a reinstall for a change to code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from eval.hidden import run_hidden
from fixgraph import config
from fixgraph.repo.workspace import Worktree
from scoring.execution.envs import VenvEnvs, install_differs
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, REPO, calc_instance, git

SETUP_PY = """from setuptools import setup
setup(
    name="pkg",
    classifiers=[
        'Programming Language :: Python :: 3.8',
    ],
    packages=[
        'pkg',
    ],
    install_requires=['mpmath>=0.19'],
)
"""

SETUP_CFG = """[metadata]
name = pkg

[options]
install_requires = mpmath

[tool:pytest]
addopts = -q
"""


def _commit(repo: Path, files: dict[str, str | None], message: str = "change") -> str:
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"setup.py": SETUP_PY, "setup.cfg": SETUP_CFG, "pkg/__init__.py": "", "pkg/core.py": "X = 1\n",
                   "pkg/_ext/gen.py": "# generated from gen.templ\n", "pkg/_ext/gen.templ": "{x}\n"}, "base")
    return repo


@pytest.mark.parametrize(("files", "why"), [
    ({"pkg/core.py": "X = 2\n"}, ""),                                         # code: the copy carries it
    ({"setup.py": SETUP_PY.replace("3.8'", "3.8',\n        'Programming Language :: Python :: 3.9'")}, ""),
    ({"setup.py": SETUP_PY.replace("'pkg',", "'pkg',\n        'pkg.sub',")}, ""),  # a package list
    ({"setup.cfg": SETUP_CFG.replace("-q", "-ra")}, ""),                      # a tool's section
    ({"pkg/new.py": "Y = 1\n"}, ""),                                          # a module inside the package
    ({"setup.py": SETUP_PY.replace("0.19", "1.0")}, "setup.py changed"),      # a requirement
    ({"setup.cfg": SETUP_CFG.replace("= mpmath", "= mpmath\n    numpy")}, "setup.cfg changed"),
    ({"pkg/_ext/speedup.pyx": "cdef int x\n"}, "pkg/_ext/speedup.pyx changed"),
    ({"extra.py": "Z = 1\n"}, "extra.py added at the top"),                   # a new top-level name
    ({"newpkg/__init__.py": ""}, "newpkg/__init__.py added at the top"),
    ({"pkg/_ext/spec.json": "{}\n"}, "pkg/_ext/spec.json changed beside generated code"),
])
def test_what_an_install_reads_decides_whether_it_serves_another_commit(repo: Path, files: dict[str, str | None],
                                                                        why: str) -> None:
    old = git(repo, "rev-parse", "HEAD")
    new = _commit(repo, files)
    wt = Worktree(repo, new)
    # what the install generated beside its sources (not metadata) marks its folder as built
    artifacts = ["pkg.egg-info/PKG-INFO", "pkg/_version.py", "pkg/_ext/gen_impl.py"]
    assert install_differs(wt, old, new, artifacts) == why


def test_a_commit_the_repository_lacks_is_a_reason_to_reinstall(repo: Path) -> None:
    old = git(repo, "rev-parse", "HEAD")
    assert install_differs(Worktree(repo, old), old, "0" * 40, []) == f"cannot compare {old[:12]} with 000000000000"


@pytest.mark.slow
def test_a_commit_that_changes_only_code_runs_on_the_install_of_another(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "python": "{}.{}".format(*sys.version_info[:2]),
        "pip_packages": ["pytest"],
        # each install leaves a line beside the env's folders (it runs in the env's src folder)
        "install": "echo install >> ../installs && python -m pip install --no-build-isolation -e .",
        "test_cmd": "pytest -rA",
    }
    inst, wt, cache = calc_instance(tmp_path, files={"pyproject.toml": CALC_PYPROJECT})
    inst = inst.model_copy(update={"version": "0.1"})
    mirror = tmp_path / "mirrors" / REPO.replace("/", "+")

    def envs_with(**kw: Any) -> tuple[VenvEnvs, Any]:
        from scoring.execution.runner import SubprocessRunner
        settings = config.TestSettings(backend="venv", timeout_s=120, **kw)
        envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
        return envs, SubprocessRunner(settings, tmp_path / "cache", envs, "venv")

    envs, runner = envs_with()
    first = run_hidden(runner, inst, wt, "")
    assert first.runnable, (first.reason, first.log_tail)
    assert first.fail_to_pass == {"tests/test_calc.py::test_add": "FAILED"}
    env_dir = envs.env_path(inst.task())
    installs = env_dir / "installs"
    assert installs.read_text().splitlines() == ["install"]

    # A later base commit that fixes the code: the install at the first commit serves it, and the
    # run imports the later commit's code (its own copy), so the hidden test now passes.
    fixed = _commit(mirror, {"calc.py": CALC.replace("return a - b", "return a + b")}, "fix add")
    later = inst.model_copy(update={"base_commit": fixed, "instance_id": "fixture__calc-2"})
    out = run_hidden(runner, later, cache.worktree(REPO, fixed, later.instance_id), "")
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    meta = json.loads((env_dir / "env.json").read_text())
    assert installs.read_text().splitlines() == ["install"]
    assert meta["installed_commit"] == inst.base_commit and meta["serves"] == [fixed]

    # A commit that changes the build configuration is installed anew.
    bumped = _commit(mirror, {"pyproject.toml": CALC_PYPROJECT.replace('"0.1"', '"0.2"')}, "version 0.2")
    third = inst.model_copy(update={"base_commit": bumped, "instance_id": "fixture__calc-3"})
    assert run_hidden(runner, third, cache.worktree(REPO, bumped, third.instance_id), "").runnable
    assert installs.read_text().splitlines() == ["install"] * 2
    meta = json.loads((env_dir / "env.json").read_text())
    assert meta["installed_commit"] == bumped and meta["serves"] == []

    # ``reuse_install = false`` installs every commit, as the harness does.
    strict, strict_runner = envs_with(reuse_install=False)
    assert run_hidden(strict_runner, later, cache.worktree(REPO, fixed, "fixture__calc-2b"), "").runnable
    assert installs.read_text().splitlines() == ["install"] * 3
    assert json.loads((env_dir / "env.json").read_text())["installed_commit"] == fixed


def test_an_answer_is_kept_for_the_process_and_a_failed_comparison_asked_again(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scoring.execution import envs

    old = git(repo, "rev-parse", "HEAD")
    new = _commit(repo, {"extra.py": "Z = 1\n"})
    asked: list[str] = []
    real = envs.subprocess.run

    def counted(cmd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        asked.append(" ".join(cmd[3:5]))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(envs.subprocess, "run", counted)
    wt = Worktree(repo, new)
    assert install_differs(wt, old, new, []) == install_differs(wt, old, new, []) == "extra.py added at the top"
    assert asked == ["diff --no-renames"]  # once: the second lookup reads the answer
    assert install_differs(wt, old, new, ["pkg/x.py"]) == "extra.py added at the top" and len(asked) == 2
    missing = "1" * 40
    for _ in range(2):  # a comparison git could not make is not kept
        assert install_differs(wt, old, missing, []).startswith("cannot compare")
    assert len(asked) == 4
