"""The venv backend end to end on a fixture repo: build once, cache, run in the built env."""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from eval.hidden import run_hidden
from fixgraph import config
from fixgraph.sandbox.process import Limits, can_bind
from scoring.execution.envs import VenvEnvs, _pointed_at
from scoring.execution.runner import SubprocessRunner
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, apply_to, calc_instance, diff_for

FIXED = CALC.replace("return a - b", "return a + b")

# Like the tests of a repo run under tox, which drops PYTHONPATH: the package must come from the
# env's (editable) install, and that install must lead to the run's working copy.
SUBPROCESS_TEST = '''

def test_installed_package_is_the_working_copy():
    import os, subprocess, sys
    # from "/", with no PYTHONPATH: only the env's install can lead to calc
    out = subprocess.run([sys.executable, "-c", "import calc; print(calc.__file__)"], cwd="/",
                         env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, check=True)
    assert os.path.samefile(out.stdout.strip(), os.path.join(os.environ["FIXGRAPH_REPO_ROOT"], "calc.py"))


def test_generated_module():
    import calc_version
    assert calc_version.V == 1
'''

@pytest.mark.slow
@pytest.mark.parametrize("bind", [True, False], ids=["bind-mount", "repointed-link"])
def test_venv_backend_builds_once_and_runs_the_patched_code(tmp_path: Path, monkeypatch, bind: bool) -> None:
    if bind and not can_bind(Limits(60, 60, 512, network_isolation=True)):
        pytest.skip("no mount namespace here: runs use the repointed link")  # .ci/run fails on a skip
    monkeypatch.setattr("scoring.execution.runner.can_bind", lambda limits: bind)
    spec: dict[str, Any] = {
        "python": "{}.{}".format(*sys.version_info[:2]),
        "pip_packages": ["pytest"],
        # a generated module, like setuptools_scm's _version.py: not in git, needed by the tests
        "install": "python -m pip install --no-build-isolation -e . && printf 'V = 1\\n' > calc_version.py",
        "test_cmd": "pytest -rA",
    }
    inst, wt, _ = calc_instance(tmp_path, extra_tests=SUBPROCESS_TEST, files={"pyproject.toml": CALC_PYPROJECT})
    inst = inst.model_copy(update={
        "version": "0.1",
        "PASS_TO_PASS": [*inst.PASS_TO_PASS, "tests/test_calc.py::test_installed_package_is_the_working_copy",
                         "tests/test_calc.py::test_generated_module"],
    })
    settings = config.TestSettings(backend="venv", timeout_s=120)
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings,
                    specs=lambda repo, version: spec if repo == inst.repo else None)
    runner = SubprocessRunner(settings, tmp_path / "cache", envs, "venv")

    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert set(out.pass_to_pass_after.values()) == {"PASSED"}
    env_dir = envs.env_path(inst.task())
    meta = json.loads((env_dir / "env.json").read_text())
    assert meta["ok"] and meta["python_version"] == spec["python"]
    # what the install step wrote into the checkout is listed and laid over each working copy
    assert meta["artifacts"] == ["calc_version.py"]
    # after the run the install leads back to the built checkout
    assert (env_dir / "src").resolve() == (env_dir / "base").resolve()

    wt.reset()
    empty = run_hidden(runner, inst, wt, "")
    assert empty.fail_to_pass == {"tests/test_calc.py::test_add": "FAILED"}
    assert json.loads((env_dir / "env.json").read_text())["seconds"] == meta["seconds"]  # not rebuilt


def test_runs_in_a_sandbox_share_an_env_and_a_reinstall_waits_for_them(tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "base").mkdir(parents=True)
    (env / "src").symlink_to(env / "base")
    lock = tmp_path / "env.run.lock"
    with _pointed_at(env, tmp_path / "a", can_bind=True) as first:
        # a second run enters at once: no queue behind the first
        with _pointed_at(env, tmp_path / "b", can_bind=True) as second:
            assert first == [(tmp_path / "a", env / "base")] and second == [(tmp_path / "b", env / "base")]
            assert (env / "src").resolve() == (env / "base").resolve()  # nothing shared was moved
        with open(lock, "a+") as fh:  # what a reinstall takes: refused while a run holds the env
            with pytest.raises(BlockingIOError):
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with _pointed_at(env, tmp_path / "c", can_bind=False) as binds:
        assert binds == [] and (env / "src").resolve() == (tmp_path / "c").resolve()
    assert (env / "src").resolve() == (env / "base").resolve()


def test_a_failed_build_is_cached_with_its_reason(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    spec = {"python": "1.0", "test_cmd": "pytest -rA"}  # no such interpreter anywhere
    settings = config.TestSettings(backend="venv")
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
    runner = SubprocessRunner(settings, tmp_path / "cache", envs, "venv")
    out = run_hidden(runner, inst, wt, "")
    assert not out.runnable
    assert out.reason == "env could not be built: needs Python 1.0 for calc 0.1: `pyenv install 1.0` (uv offers no Python 1.0 build)"
    meta = json.loads((envs.env_path(inst.task()) / "env.json").read_text())
    assert meta["ok"] is False and "needs Python 1.0" in meta["reason"]
    assert run_hidden(runner, inst, wt, "").reason == out.reason
    again = json.loads((envs.env_path(inst.task()) / "env.json").read_text())
    assert (again["build_id"], again["build_tries"], again["retryable"]) == (meta["build_id"], 1, False)


@pytest.mark.slow
def test_a_failed_install_is_tried_once_more_then_its_failure_is_final(tmp_path: Path) -> None:
    """A reinstall that met a busy machine failed once and was then refused for good; now a commit
    gets a second install, and only a second failure is cached as final."""
    from scoring.execution.testenv import EnvError

    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    # each try leaves a line beside the env's folders (the install runs in its src folder)
    spec = {"python": "{}.{}".format(*sys.version_info[:2]), "install": "echo try >> ../tries; exit 1",
            "test_cmd": "pytest -rA"}
    settings = config.TestSettings(backend="venv")
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
    for _ in range(3):
        with pytest.raises(EnvError, match="install step failed"):
            envs.get(inst.task(), wt)
    assert (envs.env_path(inst.task()) / "tries").read_text().splitlines() == ["try", "try"]


@pytest.mark.slow
def test_a_build_that_failed_in_pip_is_built_once_more_then_its_failure_is_final(tmp_path: Path) -> None:
    """A build that met a busy package index was refused for good until its folder was deleted;
    now a pip step's failure gets a second build, and only a second failure is final. A failure
    that cannot change (no such Python) is not retried (test above)."""
    from scoring.execution.testenv import EnvError

    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    spec = {"python": "{}.{}".format(*sys.version_info[:2]), "pip_packages": [str(tmp_path / "no-such-package")],
            "test_cmd": "pytest -rA"}
    settings = config.TestSettings(backend="venv")
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
    meta_path = envs.env_path(inst.task()) / "env.json"
    builds = []
    for _ in range(3):
        with pytest.raises(EnvError, match="installing pip_packages failed"):
            envs.get(inst.task(), wt)
        meta = json.loads(meta_path.read_text())
        builds.append((meta["build_id"], meta["build_tries"], meta["retryable"]))
    assert builds[0][1:] == (1, True) and builds[1][1:] == (2, True)
    assert builds[0][0] != builds[1][0]  # built again
    assert builds[2] == builds[1]  # and then final


@pytest.mark.parametrize(("record", "interpreter", "built"), [
    (None, False, (1, None)),  # no record: a first build
    ({"ok": False, "retryable": True}, False, (2, None)),  # a record without build_tries is one build
    ({"ok": False, "retryable": True, "build_tries": 2}, False, None),  # tried BUILD_TRIES times: final
    ({"ok": False, "retryable": False}, False, None),  # a failure that cannot change: final
    ({"ok": True, "site": {}}, True, None),  # built and as its last install left it: used
    ({"ok": True, "site": {}}, False, (1, "its interpreter is gone")),  # changed outside fixgraph
])
def test_when_an_env_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: dict[str, Any] | None,
                                    interpreter: bool, built: tuple[int, str | None] | None) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", config.TestSettings(backend="venv"))
    path = envs.env_path(inst.task())
    if interpreter:
        (path / "venv" / "bin").mkdir(parents=True)
        (path / "venv" / "bin" / "python").write_text("")
    monkeypatch.setattr(VenvEnvs, "_build", lambda self, task, wt, spec, path: {"ok": False, "build_id": "new"})
    meta = envs._built(inst.task(), wt, {}, path, record)
    if built is None:
        assert meta is record and not (path / "env.json").exists()
    else:
        assert (meta["build_id"], meta["build_tries"], meta.get("rebuilt_because")) == ("new", *built)
        assert json.loads((path / "env.json").read_text()) == meta


@pytest.mark.parametrize("reason", [
    "needs Python 3.9 for calc 0.1: `uv python install 3.9` or `pyenv install 3.9`",
    "building offline needs Debian's libqhull-dev: apt-get install libqhull-dev",
])
def test_a_build_that_failed_on_what_the_machine_lacked_is_built_once_the_machine_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    """The reason names one command; once the user ran it, the env is built, not refused for good.
    Records written before ``machine_fault`` existed are known by their reason."""
    from scoring.execution import envs as envs_mod
    from scoring.execution.readiness import check_env

    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    spec = {"python": "{}.{}".format(*sys.version_info[:2]), "test_cmd": "pytest -rA"}
    settings = config.TestSettings(backend="venv")
    envs = VenvEnvs(tmp_path / "cache" / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
    path = envs.env_path(inst.task())
    path.mkdir(parents=True)
    record = {"ok": False, "retryable": False, "reason": reason, "build_id": "old"}
    (path / "env.json").write_text(json.dumps(record))
    monkeypatch.setattr(VenvEnvs, "_build", lambda self, task, wt, spec, path: {"ok": False, "build_id": "new"})
    lacking = "building offline needs Debian's libqhull-dev: apt-get install libqhull-dev"
    monkeypatch.setattr(envs_mod, "missing_system_packages", lambda repo: lacking)
    monkeypatch.setattr("scoring.execution.readiness.missing_system_packages", lambda repo: lacking)
    assert envs._built(inst.task(), wt, spec, path, record) is record  # still lacking: not built again
    assert check_env(inst.task(), tmp_path / "cache", settings, envs).reason == lacking  # said as the machine is now
    monkeypatch.setattr(envs_mod, "missing_system_packages", lambda repo: "")
    monkeypatch.setattr("scoring.execution.readiness.missing_system_packages", lambda repo: "")
    assert envs._built(inst.task(), wt, spec, path, record)["build_id"] == "new"
    assert json.loads((path / "env.json").read_text())["build_id"] == "new"
    assert check_env(inst.task(), tmp_path / "cache", settings, envs).state == "failed"  # the new record's word


def test_requirements_are_flattened_as_swebench_does(tmp_path: Path) -> None:
    from scoring.execution.specs import requirements_text

    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "test.txt").write_text("-e .\n-r min.txt\npytest>=7\n# comment\ntypes-pkg_resources==0.1\n")
    (tmp_path / "reqs" / "min.txt").write_text("astroid==2.12\n.[testutils]\n")
    text = requirements_text(tmp_path, "pylint-dev/pylint", ["missing.txt", "reqs/test.txt"])
    assert text is not None
    assert text.split() == ["astroid==2.12", "pytest>=7", "types-setuptools"]
    assert requirements_text(tmp_path, "x/y", ["nope.txt"]) is None


def test_the_harness_s_python_overrides_the_specs_in_an_env_of_its_own(tmp_path: Path, monkeypatch) -> None:
    """Where the harness whose verdicts we compare with ran another Python (sympy 1.0: 3.7 in the
    AutoCodeRover logs, 3.9 in today's specs), that one is built, beside the specs' env."""
    from scoring.execution import envs as envs_mod

    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    monkeypatch.setitem(envs_mod.HARNESS_PYTHON, (inst.repo, "0.1"), "1.0")  # no such interpreter: no build
    spec = {"python": "3.11", "test_cmd": "pytest -rA"}
    settings = config.TestSettings(backend="venv")
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: spec)
    out = run_hidden(SubprocessRunner(settings, tmp_path / "cache", envs, "venv"), inst, wt, "")
    assert out.reason == "env could not be built: needs Python 1.0 for calc 0.1: `pyenv install 1.0` (uv offers no Python 1.0 build)"
    assert envs.env_path(inst.task()).name == "fixture+calc__0.1-py1.0" and spec["python"] == "3.11"
    assert envs_mod.HARNESS_PYTHON[("sympy/sympy", "1.0")] == "3.7"


@pytest.mark.slow
def test_a_measured_safe_substitute_is_said_in_the_env_record_and_every_run(tmp_path: Path, monkeypatch) -> None:
    from scoring.execution import envs as envs_mod
    from scoring.execution import interpreters

    here = "{}.{}".format(*sys.version_info[:2])
    spec = {"python": "3.4", "pip_packages": ["pytest"], "install": "python -m pip install --no-build-isolation -e .",
            "test_cmd": "pytest -rA"}
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": CALC_PYPROJECT})
    inst = inst.model_copy(update={"version": "0.1"})
    # No Python 3.4 here and none to install: only the table's substitute can build the env.
    monkeypatch.setattr(interpreters, "_provision", lambda xy, cache_dir: (None, "offline"))
    monkeypatch.setattr(interpreters, "SAFE_SUBSTITUTES", {(inst.repo, "0.1"): {"3.4": (here,)}})
    monkeypatch.setattr(envs_mod, "SPEC_ERA_PINS", {"3.4": ["setuptools<70"]})
    settings = config.TestSettings(backend="venv", timeout_s=120)
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings,
                    specs=lambda repo, version: spec if repo == inst.repo else None)
    runner = SubprocessRunner(settings, tmp_path / "cache", envs, "venv")
    out = run_hidden(runner, inst, wt, apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED)))
    assert out.runnable, (out.reason, out.log_tail)
    meta = json.loads((envs.env_path(inst.task()) / "env.json").read_text())
    assert meta["python_how"] == "substitute" and meta["python_version"] == here
    said = f"Python {here} for 3.4 (measured safe for {inst.repo} 0.1)"
    assert meta["python_note"] == said and said in out.notes
    # the build tools of the spec's Python, not the substitute's newest
    assert meta["era_pins"] == ["setuptools<70"]
    assert "setuptools<70" in (envs.env_path(inst.task()) / "constraints.txt").read_text().splitlines()
