"""The Docker backend's plumbing, with a stand-in ``docker`` CLI (no engine answers here)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from eval.hidden import run_hidden
from fixgraph import config
from scoring.execution.docker import DockerRunner, engine_status, eval_script, image_name, make_docker_runner
from tests.helpers.testrun_helpers import calc_instance

FAKE_DOCKER = """#!/bin/bash
# Stands in for the docker CLI: "version" answers; "run" records its argv and the eval script it
# was given, then prints a swebench-style test log (F2P passes only when a patch was applied).
if [ "$1" = "version" ]; then echo 27.0.0; exit 0; fi
if [ "$1" = "run" ]; then
  echo "$@" >> "$FAKE_DOCKER_LOG"
  for arg in "$@"; do case "$arg" in *:/fixgraph:ro) mount="${arg%%:/fixgraph:ro}";; esac; done
  cat "$mount/eval.sh" >> "$FAKE_DOCKER_LOG"
  echo ">>>>> Start Test Output"
  if grep -q "patch.diff" "$mount/eval.sh"; then echo "PASSED tests/test_calc.py::test_add"; else echo "FAILED tests/test_calc.py::test_add"; fi
  for i in 0 1 2 3 4 5 6 7 8 9; do echo "PASSED tests/test_calc.py::test_mul_$i"; done
  echo ">>>>> End Test Output"
  exit 0
fi
exit 1
"""


def test_image_name_matches_swebench() -> None:
    assert image_name("swebench", "django__django-11099") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    try:
        from swebench.image_builder.image_spec import ImageSpec  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - older swebench
        return
    spec = ImageSpec(instance_id="sympy__sympy-20590", dockerfile="FROM x", namespace="swebench")
    assert image_name("swebench", "sympy__sympy-20590") == spec.name


def test_no_engine_gives_a_clear_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI at all
    assert engine_status() == "no docker CLI on this machine"
    runner = make_docker_runner(config.TestSettings(backend="docker"), tmp_path)
    out = run_hidden(runner, inst, wt, "")
    assert (out.runnable, out.reason) == (False, "docker backend: no docker CLI on this machine")


def test_runs_in_the_instance_image_without_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "docker"
    fake.write_text(FAKE_DOCKER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"repo": "pallets/flask", "version": "2.3"})
    settings = config.TestSettings(backend="docker", memory_mb=2048)
    runner = make_docker_runner(settings, tmp_path / "cache")
    assert isinstance(runner, DockerRunner)
    out = run_hidden(runner, inst, wt, "diff --git a/calc.py b/calc.py\n")
    assert out.runnable, out.reason
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert out.pass_to_pass_before["tests/test_calc.py::test_mul_0"] == "PASSED"
    text = log.read_text()
    assert "--network none" in text and "--memory 2048m" in text
    assert "swebench/sweb.eval.x86_64.fixture_1776_calc-1:latest" in text
    assert "pytest -rA tests/test_calc.py" in text  # swebench's test command for flask 2.3
    assert f"git checkout {inst.base_commit} -- tests/test_calc.py" in text


def test_eval_script_resets_tests_after_the_patch() -> None:
    from fixgraph.dataset import Instance
    from scoring.execution.outcomes import hidden_suite

    inst = Instance(instance_id="a__b-1", repo="psf/requests", base_commit="abc", problem_statement="",
                    test_patch="diff --git a/test_requests.py b/test_requests.py\n", FAIL_TO_PASS=["x"])
    suite = hidden_suite(inst.task(), inst.evaluation_data())
    script = eval_script(inst.task(), {"test_cmd": "pytest -rA"}, suite, with_patch=True)
    lines = script.splitlines()
    apply_at = next(i for i, ln in enumerate(lines) if "/fixgraph/patch.diff" in ln)
    reset_at = lines.index("git checkout abc -- test_requests.py 2>/dev/null || rm -f test_requests.py")
    test_at = next(i for i, ln in enumerate(lines) if "/fixgraph/test.diff" in ln)
    assert apply_at < reset_at < test_at
    assert "pytest -rA test_requests.py" in script
    assert "patch.diff" not in eval_script(inst.task(), {"test_cmd": "pytest -rA"}, suite, with_patch=False)


def test_eval_script_writes_the_reproduction_test_and_runs_it_alone() -> None:
    from fixgraph.dataset import Task
    from scoring.execution.outcomes import ReproTest

    task = Task(instance_id="a__b-1", repo="psf/requests", base_commit="abc", problem_statement="")
    suite = ReproTest("tests/test_issue.py", "def test_x():\n    assert 0\n", ("x",)).suite(60)
    script = eval_script(task, {"test_cmd": "pytest -rA"}, suite, with_patch=True)
    assert "cp /fixgraph/added/0 tests/test_issue.py" in script
    assert script.index("/fixgraph/patch.diff") < script.index("cp /fixgraph/added/0")
    assert "pytest -rA tests/test_issue.py" in script and "test.diff" not in script
