"""Bad input to the test runner: each gives a clear outcome, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.hidden import run_hidden
from fixgraph import config
from scoring.execution.docker import make_docker_runner
from scoring.execution.runner import make_runner
from scoring.verdict import fix_score
from tests.helpers.testrun_helpers import CALC, TEST_FILE, apply_to, calc_instance, diff_for, local_settings

FIXED = CALC.replace("return a - b", "return a + b")
F2P = "tests/test_calc.py::test_add"


@pytest.fixture(scope="module")
def specs_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for swebench's install specs (fetched from PyPI once when swebench 5 lacks them)."""
    return tmp_path_factory.mktemp("specs-cache")


def test_test_patch_that_does_not_apply(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    bad = diff_for(tmp_path, "tests/test_calc.py", "something else\n", "something new\n")
    inst = inst.model_copy(update={"test_patch": bad})
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, "")
    assert not out.runnable
    assert out.reason.startswith("test_patch does not apply:")
    assert fix_score.compute(out, 1.0, None).get("kind") == "none"


@pytest.mark.slow
def test_test_id_that_does_not_exist(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, f2p=[F2P, "tests/test_calc.py::test_no_such_test"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass == {F2P: "PASSED", "tests/test_calc.py::test_no_such_test": "MISSING"}
    assert fix_score.compute(out, 1.0, None).get("test_pass_rate") == 0.5


@pytest.mark.slow
def test_only_unknown_test_ids_means_nothing_collected(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, f2p=["tests/test_calc.py::test_ghost"])
    inst = inst.model_copy(update={"PASS_TO_PASS": []})
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, "")
    assert not out.runnable
    assert out.reason.startswith("nothing collected")


@pytest.mark.slow
def test_hanging_test_command(tmp_path: Path) -> None:
    # conftest.py hangs at import: the command never gets to a single test
    hang = "import time\ntime.sleep(600)\n"
    inst, wt, _ = calc_instance(tmp_path, files={"tests/conftest.py": hang})
    out = run_hidden(make_runner(local_settings(timeout_s=3.0), tmp_path / "cache"), inst, wt, "")
    assert not out.runnable
    assert out.timed_out
    assert out.reason == "nothing collected: the test command timed out"
    assert out.seconds < 20


@pytest.mark.slow
def test_output_that_is_not_utf8(tmp_path: Path) -> None:
    extra = ("\n\ndef test_bytes():\n    import sys\n"
             "    sys.stdout.buffer.write(b'\\xff\\xfe\\x80 invalid \\xc3\\x28\\n')\n"
             "    sys.stdout.flush()\n    assert False\n")
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, "tests/test_calc.py::test_bytes"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass == {F2P: "PASSED", "tests/test_calc.py::test_bytes": "FAILED"}
    out.log_tail.encode("utf-8")  # valid text, whatever the tests printed


@pytest.mark.slow
def test_patch_that_deletes_the_test_file(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    fix = diff_for(tmp_path, "calc.py", CALC, FIXED)
    delete = diff_for(tmp_path, "tests/test_calc.py", TEST_FILE, None)
    patch = apply_to(wt, fix + delete)
    assert not wt.exists("tests/test_calc.py")
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass == {F2P: "PASSED"}  # the instance's tests, not the patch's, were run
    assert any("tests/test_calc.py" in n for n in out.notes)
    assert not wt.exists("tests/test_calc.py")  # and the task's worktree was left alone


def test_repo_version_with_no_known_specs_and_a_bad_committed_table(tmp_path: Path, specs_cache: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, files={".fixgraph.toml": 'pythn = "3.11"\n'})
    inst = inst.model_copy(update={"repo": "psf/requests", "version": "99.9"})
    settings = config.TestSettings(backend="venv", env_dir=tmp_path / "envs")
    out = run_hidden(make_runner(settings, specs_cache), inst, wt, "")
    assert not out.runnable
    assert out.reason.startswith("env could not be built: .fixgraph.toml: fixgraph config: unknown key(s) pythn")
    parts = fix_score.compute(out, 0.5, 0.75)
    assert parts.get("kind") == "semantic"


def test_no_fail_to_pass_tests(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, f2p=[])
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, "")
    assert (out.runnable, out.reason) == (False, "no FAIL_TO_PASS tests")


def test_docker_backend_without_an_engine_says_so(tmp_path: Path) -> None:
    from scoring.execution.docker import engine_status

    if not engine_status() == "":
        runner = make_docker_runner(config.TestSettings(backend="docker"), tmp_path)
        inst, wt, _ = calc_instance(tmp_path)
        out = run_hidden(runner, inst, wt, "")
        assert not out.runnable
        assert out.reason.startswith("docker backend: ")
        assert "Docker" in out.reason or "docker" in out.reason.split(": ", 1)[1]
    else:  # pragma: no cover - an engine answers on this machine
        pytest.skip("a Docker engine answers here")
