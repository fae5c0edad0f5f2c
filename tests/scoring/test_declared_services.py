"""The services a committed table declares: started on the run's loopback before the tests, the
port given to them, stopped after (the whole process group); a service whose binary is missing,
that exits first or never listens stops the run in seconds with one line naming it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval.fixtures.service_repo import UPPER_SERVER, service_files
from eval.hidden import run_hidden
from fixgraph import config
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import Worktree
from scoring.execution.declared_services import OUT_NAME, OUT_VAR, outcome, unusable, wrapped
from scoring.execution.envs import VenvEnvs
from scoring.execution.infer import KNOWN_SERVICES, Service
from scoring.execution.runner import SubprocessRunner
from scoring.execution.testenv import EnvError, Suite
from scoring.verdict import fix_score
from tests.helpers.testrun_helpers import CALC, CALC_PYPROJECT, apply_to, calc_instance, diff_for

CLIENT = ("import os, socket\n"
          "c = socket.create_connection(('127.0.0.1', int(os.environ['UPPER_PORT'])), timeout=10)\n"
          "c.sendall(b'hi\\n'); print('got', c.makefile().readline().strip(), os.environ.get('UPPER_ADDR'))\n")


def _start(tmp_path: Path, services: tuple[Service, ...], test: str = CLIENT) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "services").mkdir(exist_ok=True)
    (tmp_path / "services" / "upper_server.py").write_text(UPPER_SERVER)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    argv = wrapped(sys.executable, services, [sys.executable, "-c", test], env, tmp_path)
    assert env[OUT_VAR] == str(tmp_path / OUT_NAME)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - start


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state  # a zombie is no server: its reaper is the test process's init


def test_the_tests_get_the_service_on_a_free_port_and_its_whole_group_is_stopped_after(tmp_path: Path) -> None:
    # A shell that forks the server: stopping the shell alone would leave the server listening.
    upper = Service("upper", "sh -c 'python services/upper_server.py {port} server.pid & wait'",
                    env=(("UPPER_ADDR", "127.0.0.1:{port}"),), timeout_s=20)
    done, _ = _start(tmp_path, (upper,))
    assert done.returncode == 0, done.stderr
    [entry] = [json.loads(ln) for ln in (tmp_path / OUT_NAME).read_text().splitlines()]
    port = entry["port"]
    assert entry["ok"] and done.stdout.strip() == f"got HI 127.0.0.1:{port}"
    assert _gone(int((tmp_path / "server.pid").read_text()))
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    error, notes = outcome(tmp_path, (upper,), False)
    assert error == "" and notes == [f"service upper started on 127.0.0.1:{port} in {entry['seconds']}s, "
                                     "stopped after the tests"]


def test_a_command_that_leaves_its_server_behind_and_exits_0_is_up_by_its_port(tmp_path: Path) -> None:
    upper = Service("upper", "sh -c 'python services/upper_server.py {port} server.pid & exit 0'", timeout_s=20)
    done, _ = _start(tmp_path, (upper,))
    assert done.returncode == 0 and "got HI" in done.stdout, done.stderr
    assert _gone(int((tmp_path / "server.pid").read_text()))  # still in the group, stopped with it
    quits = Service("kv", "python -c 'pass' {port}", timeout_s=1)
    (tmp_path / OUT_NAME).unlink()
    done, _ = _start(tmp_path, (quits,))
    assert done.returncode == 3 and outcome(tmp_path, (quits,), False)[0].endswith(
        "not listening on port " + done.stderr.split("on port ")[1].split(" ")[0] + " after 1s (its command exited with code 0)")


def test_the_tests_exit_code_is_the_runs(tmp_path: Path) -> None:
    upper = Service("upper", "python services/upper_server.py {port}", timeout_s=20)
    done, _ = _start(tmp_path, (upper,), CLIENT + "raise SystemExit(5)\n")
    assert done.returncode == 5 and "got HI" in done.stdout


def test_a_missing_binary_an_early_exit_and_a_server_that_never_listens_stop_the_run(tmp_path: Path) -> None:
    cases = [
        (Service("kv", "kv-server-not-installed --port {port}"),
         "service kv not started: kv-server-not-installed is not on the env's or the machine's PATH"),
        (Service("kv", "python -c 'raise SystemExit(4)' {port}"),
         "service kv not started: exited with code 4 before listening on port "),
        (Service("kv", "python -c 'import time; time.sleep(300)' {port}", timeout_s=2),
         "service kv not started: not listening on port "),
    ]
    for service, why in cases:
        (tmp_path / OUT_NAME).unlink(missing_ok=True)
        done, seconds = _start(tmp_path, (service,), "open('ran', 'w')")
        assert done.returncode == 3 and not (tmp_path / "ran").exists()
        assert seconds < 30
        error, _ = outcome(tmp_path, (service,), False)
        assert error.startswith(why), error
        assert "\n" not in error and f"[fixgraph] {why}" in done.stderr


def test_a_fixed_port_in_use_is_said_and_a_later_service_is_not_started(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        first = Service("upper", "python services/upper_server.py {port} first.pid", timeout_s=20)
        second = Service("kv", "python services/upper_server.py {port}", port=port)
        done, _ = _start(tmp_path, (first, second))
    assert done.returncode == 3
    assert outcome(tmp_path, (first, second), False)[0] == f"service kv not started: port {port} is already in use"
    assert _gone(int((tmp_path / "first.pid").read_text()))  # the one already up was stopped


def test_a_name_without_a_command_is_refused_before_anything_runs(tmp_path: Path) -> None:
    assert unusable((Service("postgres"),)).startswith("service postgres not started: no command for service postgres")
    assert unusable((KNOWN_SERVICES["redis"],)) == ""
    assert outcome(tmp_path, (Service("kv", "kv {port}"),), True)[0] == (
        "service kv not started: the run's timeout came first")
    assert os.environ.get(OUT_VAR) is None


# Through the real runner: the env built once (the services are no part of its key), the tests in
# the sandbox, the service in the same sandbox before them.
MINOR = "{}.{}".format(*sys.version_info[:2])


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("declared-envs")


def _runner(shared: Path) -> SubprocessRunner:
    settings = config.TestSettings(backend="venv", timeout_s=180)
    envs = VenvEnvs(shared / "envs", shared / "cache", settings, specs=lambda repo, version: None)
    return SubprocessRunner(settings, shared / "cache", envs, "venv")


def _calc(tmp_path: Path, table: str = "") -> tuple[Instance, Worktree]:
    pyproject = CALC_PYPROJECT.replace('version = "0.1"\n', f'version = "0.1"\nrequires-python = "=={MINOR}.*"\n'
                                       '[project.optional-dependencies]\ntest = ["pytest"]\n')
    inst, wt, _ = calc_instance(tmp_path, files={"pyproject.toml": pyproject, **service_files(table)})
    return inst, wt


@pytest.mark.slow
def test_the_runner_starts_the_declared_service_and_the_base_run_fails_without_it(tmp_path: Path, shared: Path) -> None:
    runner = _runner(shared)
    inst, wt = _calc(tmp_path / "with")
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a + b")))
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, (out.reason, out.log_tail)
    assert out.fail_to_pass == {"tests/test_calc.py::test_add": "PASSED"}
    assert set(out.pass_to_pass_after.values()) == {"PASSED"} and len(out.pass_to_pass_after) == 10
    assert fix_score.compute(out, 0.5, 0.75).get("kind") == "tests"
    run = runner.run_suite(inst.task(), wt, None, Suite(targets=("tests/test_calc.py",)))
    assert "services started for the tests: upper (`python services/upper_server.py {port}`" in run.env
    assert any(n.startswith("service upper started on 127.0.0.1:") for n in run.notes), run.notes
    # The same repository declaring no service: the same env, and every test errors at the base.
    inst, wt = _calc(tmp_path / "without", "services = []\n")
    run = runner.run_suite(inst.task(), wt, None, Suite(targets=("tests/test_calc.py",)))
    assert not run.error and run.statuses and set(run.statuses.values()) == {"ERROR"}, run.log_tail()
    assert len([p for p in (shared / "envs").iterdir() if p.is_dir()]) == 1


@pytest.mark.slow
@pytest.mark.parametrize("table, why", [
    ('services = [{name = "upper", command = "upper-server-not-installed {port}"}]\n',
     "service upper not started: upper-server-not-installed is not on the env's or the machine's PATH"),
    ('services = [{name = "upper", command = "python -c \'import sys; sys.exit(4)\' {port}"}]\n',
     "service upper not started: exited with code 4 before listening on port "),
    ('services = ["upper"]\n', "service upper not started: no command for service upper"),
], ids=["missing-binary", "exits-early", "bare-unknown-name"])
def test_a_service_that_does_not_come_up_is_the_tasks_reason_and_it_is_scored_without_tests(
        tmp_path: Path, shared: Path, table: str, why: str) -> None:
    inst, wt = _calc(tmp_path, table)
    out = run_hidden(_runner(shared), inst, wt, "")
    assert not out.runnable and out.reason.startswith(why), out.reason
    assert "\n" not in out.reason
    assert fix_score.compute(out, 0.5, 0.75).get("kind") == "semantic"


@pytest.mark.slow
def test_code_run_beside_the_tests_gets_the_services_too(tmp_path: Path, shared: Path) -> None:
    runner = _runner(shared)
    inst, wt = _calc(tmp_path / "with")
    ask = "import sys; sys.path.insert(0, 'tests'); from conftest import ask; print(ask('issue code'))"
    done, _ = runner.run_python(inst.task(), wt, {}, ["-c", ask], 60)
    assert done.returncode == 0 and "ISSUE CODE" in done.output, done.output
    inst, wt = _calc(tmp_path / "missing", '[[services]]\nname = "upper"\ncommand = "no-such-server {port}"\n')
    with pytest.raises(EnvError, match="service upper not started: no-such-server is not on the env's"):
        runner.run_python(inst.task(), wt, {}, ["-c", "print(1)"], 60)
