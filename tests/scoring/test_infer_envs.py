"""The venv backend on a repository swebench has no spec for: the env inferred from the task's
commit, built, keyed by its dependency files and reused; a bad committed table or a failing setup
step is the task's reason, never a crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from eval import build_bench, env_bench
from eval.fixtures.repos import make_monorepo
from eval.hidden import run_hidden
from fixgraph import config
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import RepoCache
from scoring.execution.envs import VenvEnvs
from scoring.execution.readiness import check_tasks
from scoring.execution.runner import SubprocessRunner
from scoring.verdict import fix_score
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, apply_to, calc_instance, diff_for

MINOR = "{}.{}".format(*sys.version_info[:2])
PYPROJECT = CALC_PYPROJECT.replace('version = "0.1"\n', f'version = "0.1"\nrequires-python = "=={MINOR}.*"\n'
                                   '[project.optional-dependencies]\ntest = ["pytest"]\n')


def _runner(tmp_path: Path) -> tuple[VenvEnvs, SubprocessRunner]:
    settings = config.TestSettings(backend="venv", timeout_s=120)
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", settings, specs=lambda repo, version: None)
    return envs, SubprocessRunner(settings, tmp_path / "cache", envs, "venv")


@pytest.mark.slow
def test_a_task_without_specs_runs_its_tests_in_the_env_inferred_from_its_commit(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": PYPROJECT})
    envs, runner = _runner(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a + b")))
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert fix_score.compute(out, 0.5, 0.75).get("kind") == "tests"
    (env_dir,) = [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]
    assert env_dir.name.startswith("fixture+calc__inferred-")
    meta = json.loads((env_dir / "env.json").read_text())
    assert meta["ok"] and meta["python_version"] == MINOR
    assert "requires-python" in meta["inferred"] and "pip install -e .; pip install pytest" in meta["inferred"]
    # An unknown version of the same commit: the same dependency files, the same env.
    again = run_hidden(runner, inst.model_copy(update={"version": "9.9"}), wt, patch)
    assert again.runnable and [p.name for p in (tmp_path / "envs").iterdir() if p.is_dir()] == [env_dir.name]


def test_a_committed_table_that_is_not_toml_is_the_reason_and_nothing_is_built(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": PYPROJECT, ".fixgraph.toml": "setup = [\n"})
    _, runner = _runner(tmp_path)
    out = run_hidden(runner, inst, wt, "")
    assert not out.runnable
    assert out.reason.startswith("env could not be built: .fixgraph.toml is not valid TOML")
    assert "\n" not in out.reason
    assert fix_score.compute(out, 0.5, 0.75).get("kind") == "semantic"
    assert not (tmp_path / "envs").exists() or not [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]


@pytest.mark.slow
def test_a_committed_setup_step_that_fails_is_named_with_its_file(tmp_path: Path) -> None:
    table = f'python = "{MINOR}"\nsetup = ["python -c \\"raise SystemExit(3)\\""]\n'
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": PYPROJECT, ".fixgraph.toml": table})
    _, runner = _runner(tmp_path)
    out = run_hidden(runner, inst, wt, "")
    assert not out.runnable
    assert "install step of .fixgraph.toml failed" in out.reason, out.reason
    assert fix_score.compute(out, 0.5, 0.75).get("kind") == "semantic"


@pytest.mark.slow
def test_the_env_benches_and_the_check_find_an_inferred_envs_record(tmp_path: Path) -> None:
    inst, wt, cache = calc_instance(tmp_path, files={"pyproject.toml": PYPROJECT})
    cache.remove_worktree(inst.repo, wt)
    envs, _ = _runner(tmp_path)
    row = env_bench.build_one(envs, cache, inst)
    assert row["ok"], row["reason"]
    assert row["env"].startswith("fixture+calc__inferred-") and row["python"] == MINOR
    assert row["build_seconds"] is not None and row["install_seconds"] is not None
    warm = build_bench.build_step(envs, cache, inst, "warm")
    # the same env, found by its record: not built again, its install the one the first row timed
    assert warm["ok"] and warm["venv_seconds"] == 0.0 and warm["install_seconds"] == row["install_seconds"]
    (rep,) = check_tasks([inst.task()], tmp_path / "cache", envs.settings.model_copy(update={"env_dir": envs.root}))
    assert (rep.state, rep.python) == ("built", MINOR) and rep.env.startswith("fixture/calc inferred ")


@pytest.mark.slow
def test_a_monorepos_tests_run_in_the_env_of_the_package_the_patch_touches(tmp_path: Path) -> None:
    row = make_monorepo(tmp_path / "mirrors", MINOR)
    inst = Instance.model_validate(row)
    cache = RepoCache(tmp_path / "cache", tmp_path / "mirrors")
    wt = cache.worktree(inst.repo, inst.base_commit, inst.instance_id)
    envs, runner = _runner(tmp_path)
    out = run_hidden(runner, inst, wt, inst.patch)
    assert out.runnable, (out.reason, out.log_tail)
    # strutil is importable only once its own package is installed: the env is strutil's
    assert out.fail_to_pass == {"packages/strutil/tests/test_core.py::test_shout_exclaims": "PASSED"}
    assert out.pass_to_pass_after == {"packages/strutil/tests/test_core.py::test_shout_upper": "PASSED"}
    (env_dir,) = [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]
    assert "package packages/strutil/" in json.loads((env_dir / "env.json").read_text())["inferred"]
    # the repository's root has nothing to install: a run with no file to go by says so, never a crash
    assert envs.spec_for(inst.task(), wt)["install"] == ""
