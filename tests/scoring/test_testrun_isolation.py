"""Isolation of test processes: scrubbed environment, no network, wall-clock kill, crash context."""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eval.attacks.sandbox import listener, outside_address
from eval.hidden import run_hidden
from fixgraph.sandbox.process import Limits, netns_prefix, run_isolated, scrubbed_env
from scoring.execution.runner import make_runner, temp_dir_apart
from tests.helpers.testrun_helpers import (
    CALC,
    apply_to,
    calc_instance,
    diff_for,
    local_settings,
    locals_section,
)

FIXED = CALC.replace("return a - b", "return a + b")
F2P = "tests/test_calc.py::test_add"


@pytest.mark.slow
def test_test_process_sees_no_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak-123")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_must_not_leak")
    extra = ("\n\ndef test_env():\n    import os\n"
             "    assert os.environ.get('OPENAI_API_KEY') is None\n"
             "    assert os.environ.get('GITHUB_TOKEN') is None\n"
             "    assert 'leak' not in repr(dict(os.environ))\n")
    out = _fixed_with_test(tmp_path, extra, "test_env")
    assert out.fail_to_pass["tests/test_calc.py::test_env"] == "PASSED"


def _fixed_with_test(tmp_path: Path, extra: str, name: str) -> Any:
    """The calc fixture's fix run with the test ``name`` (in ``extra``) among FAIL_TO_PASS."""
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, f"tests/test_calc.py::{name}"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable, out.reason
    return out


@pytest.mark.slow
def test_the_test_process_temp_dir_shares_no_folder_with_its_copy_and_is_gone_after(tmp_path: Path) -> None:
    # As /testbed and /tmp in swebench's images: docutils makes an included file's path relative to
    # the working directory when the two share a folder (sphinx-11510's gold patch failed on that).
    extra = ("\n\ndef test_tmp():\n    import os, tempfile\n"
             "    tmp = tempfile.gettempdir()\n"
             "    assert os.path.commonpath([os.getcwd(), tmp]) == '/', (os.getcwd(), tmp)\n"
             "    with open(os.path.join(tmp, 'x'), 'w') as f:\n        f.write('ok')\n"
             "    print('TMP=' + tmp)\n")
    out = _fixed_with_test(tmp_path, extra, "test_tmp")
    assert out.fail_to_pass["tests/test_calc.py::test_tmp"] == "PASSED", out.log_tail
    used = re.findall(r"TMP=(\S+)", out.log_tail)
    assert used and all(Path(p).name.startswith("fixgraph-tmp-") and not Path(p).exists() for p in used)


def test_a_runs_temp_dir_is_apart_from_its_copy(tmp_path: Path) -> None:
    for work in (Path("/tmp/fixgraph-testruns-0/ab/repo"), Path("/var/tmp/x/repo"), tmp_path / "repo"):
        got = temp_dir_apart(work)
        assert got is not None and got.parts[1] != work.resolve().parts[1] and got.name.startswith("fixgraph-tmp-")
        assert got.stat().st_mode & 0o077 == 0  # private
        got.rmdir()


def _listener() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


def _socket_case(tmp_path: Path, isolate: bool) -> str:
    srv, port = _listener()
    try:
        extra = ("\n\ndef test_socket():\n    import socket\n"
                 f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n")
        inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, "tests/test_calc.py::test_socket"])
        patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
        out = run_hidden(make_runner(local_settings(network_isolation=isolate), tmp_path / "cache"), inst, wt, patch)
        assert out.runnable, out.reason
        assert out.network_isolated is isolate
        return out.fail_to_pass["tests/test_calc.py::test_socket"]
    finally:
        srv.close()


@pytest.mark.slow
@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_socket_to_loopback_fails_in_a_network_namespace(tmp_path: Path) -> None:
    assert _socket_case(tmp_path, isolate=True) == "FAILED"


@pytest.mark.slow
def test_socket_to_loopback_works_without_isolation(tmp_path: Path) -> None:
    # The control: the same test passes when isolation is off, so the failure above is the netns.
    assert _socket_case(tmp_path, isolate=False) == "PASSED"


def _run_script(tmp_path: Path, script: str, isolate: bool = True) -> str:
    """``script`` run as a test process is: in the real sandbox, from a copy of its own."""
    run_dir = tmp_path / f"run-{time.time_ns()}"
    (run_dir / "repo").mkdir(parents=True)
    (run_dir / "home").mkdir()
    (run_dir / "repo" / "probe.py").write_text(script)
    done = run_isolated([sys.executable, "-I", "probe.py"], run_dir / "repo", scrubbed_env(run_dir / "home"),
                        Limits(30, 30, 1024, network_isolation=isolate))
    assert done.isolated_network is isolate
    return done.output


def test_a_test_process_has_a_user_name_though_its_uid_has_no_account(tmp_path: Path) -> None:
    # django's createsuperuser tests take the default username from getpass.getuser().
    out = _run_script(tmp_path, "import getpass\nprint('user=' + getpass.getuser())\n")
    assert "user=fixgraph" in out


def _host_has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_a_test_serves_and_connects_on_the_sandboxs_own_loopback(tmp_path: Path) -> None:
    # requests' test servers, django's live server: what the harness's containers allow.
    script = ("import socket\n"
              "for family, addr in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
              "    try:\n"
              "        srv = socket.socket(family)\n"
              "        srv.bind((addr, 0))\n"
              "        srv.listen(1)\n"
              "        cli = socket.create_connection((addr, srv.getsockname()[1]), timeout=5)\n"
              "        conn, _ = srv.accept()\n"
              "        cli.sendall(b'ping')\n"
              "        print('served', addr, conn.recv(4).decode())\n"
              "    except OSError as exc:\n"
              "        print('refused', addr, exc)\n")
    out = _run_script(tmp_path, script)
    assert "served 127.0.0.1 ping" in out, out
    if _host_has_ipv6_loopback():  # IPv6 off on the host: no ::1 in any namespace
        assert "served ::1 ping" in out, out
    assert "loopback left down" not in out


def _reach_script(targets: list[tuple[str, int]]) -> str:
    return ("import socket\n"
            f"for addr, port in {targets!r}:\n"
            "    try:\n"
            "        socket.create_connection((addr, port), timeout=5).close()\n"
            "        print('REACHED', addr)\n"
            "    except OSError as exc:\n"
            "        print('refused', addr, exc)\n")


@pytest.mark.slow
@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_the_hosts_loopback_and_its_outside_address_stay_out_of_reach(tmp_path: Path) -> None:
    # Loopback is up inside, but it is the namespace's own: a service on the host's 127.0.0.1 and
    # the machine's address beyond loopback are as unreachable as with loopback down.
    outside = outside_address()
    listeners = [listener(), *([listener(outside)] if outside else [])]
    targets = [("127.0.0.1", listeners[0][1]), *([(outside, listeners[1][1])] if outside else [])]
    try:
        inside = _run_script(tmp_path, _reach_script(targets))
        assert "REACHED" not in inside, inside
        assert [ln.split()[0] for ln in inside.splitlines() if ln.strip()] == ["refused"] * len(targets), inside
        assert not any(hits for _, _, hits in listeners)
        # The control: without the namespace the same script reaches both, so the refusals above are
        # the namespace's and not the listeners'.
        control = _run_script(tmp_path, _reach_script(targets), isolate=False)
        assert [ln.split()[0] for ln in control.splitlines() if ln.strip()] == ["REACHED"] * len(targets), control
    finally:
        for srv, _, _ in listeners:
            srv.close()


@pytest.mark.slow
def test_sleeping_test_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = f"{time.time_ns() % 10**6 + 300}.5"  # a sleep argument no other process has
    extra = ("\n\ndef test_sleep():\n    import subprocess, time\n"
             f"    subprocess.Popen(['sleep', {marker!r}])\n"
             f"    subprocess.Popen(['setsid', 'sleep', {marker!r}])\n"
             "    time.sleep(300)\n")
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    start = time.monotonic()
    out = run_hidden(make_runner(local_settings(timeout_s=4.0), tmp_path / "cache"), inst, wt, patch)
    assert time.monotonic() - start < 30
    assert not out.runnable
    assert out.timed_out
    assert "timed out" in out.reason
    # the test's child and a daemon in a session of its own went with it
    assert _gone_by_cmdline(marker)


def _gone_by_cmdline(marker: str, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not [pid for pid in _pids_with(marker) if not _gone(int(pid), 0.0)]:
            return True
        time.sleep(0.1)
    return False


def _pids_with(marker: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                continue
    return found


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    """Dead, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return True
        except (OSError, IndexError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


@pytest.mark.slow
def test_patch_that_hangs_scores_zero(tmp_path: Path) -> None:
    hangs = CALC.replace("    return a - b", "    while True:\n        pass")
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, hangs))
    out = run_hidden(make_runner(local_settings(timeout_s=4.0), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable  # the tests ran before the patch; the patch is what hangs
    assert out.timed_out
    assert out.fail_to_pass[F2P] == "MISSING"


@pytest.mark.slow
def test_crash_context_names_exception_frames_and_locals(tmp_path: Path) -> None:
    crashing = CALC.replace("    return a - b", "    total = [a]\n    return total + b")
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, crashing))
    out = run_hidden(make_runner(local_settings(locals_repr_chars=20), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass[F2P] == "FAILED"
    assert "TypeError" in out.crash
    assert 'can only concatenate list (not "int") to list' in out.crash
    assert "calc.py:3 in add" in out.crash
    assert "return total + b" in out.crash
    names = locals_section(out.crash, out.notes)
    assert "total = [2]" in names and "b = 3" in names


@pytest.mark.slow
def test_crash_locals_are_truncated(tmp_path: Path) -> None:
    crashing = CALC.replace("    return a - b", "    big = 'x' * 5000\n    return big + a")
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, crashing))
    out = run_hidden(make_runner(local_settings(locals_repr_chars=40), tmp_path / "cache"), inst, wt, patch)
    line = next(ln for ln in locals_section(out.crash, out.notes) if ln.startswith("big ="))
    assert len(line.strip()) <= len("big = ") + 40
    assert line.strip().endswith("...")


@pytest.mark.slow
def test_memory_limit_turns_a_huge_allocation_into_a_failure(tmp_path: Path) -> None:
    extra = "\n\ndef test_alloc():\n    block = bytearray(2 * 1024 ** 3)\n    assert block\n"
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, "tests/test_calc.py::test_alloc"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(make_runner(local_settings(memory_mb=1024), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass == {F2P: "PASSED", "tests/test_calc.py::test_alloc": "FAILED"}
    assert "MemoryError" in out.crash


@pytest.mark.slow
def test_cpu_time_limit_kills_a_spinning_patch_before_the_wall_clock(tmp_path: Path) -> None:
    spins = CALC.replace("    return a - b", "    n = 0\n    while True:\n        n += 1")
    inst, wt, _ = calc_instance(tmp_path)
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, spins))
    start = time.monotonic()
    out = run_hidden(make_runner(local_settings(cpu_s=3, timeout_s=120.0), tmp_path / "cache"), inst, wt, patch)
    assert time.monotonic() - start < 100
    assert out.runnable and not out.timed_out  # SIGXCPU, not the wall clock
    assert out.fail_to_pass[F2P] == "MISSING"


@pytest.mark.slow
def test_secret_printed_by_a_test_is_redacted_in_the_outcome_and_the_baseline_cache(tmp_path: Path) -> None:
    from fixgraph import redaction

    secret = "sk-isolation-secret-93ab1"
    redaction.register([secret])
    extra = f"\n\ndef test_leak():\n    print({secret!r})\n    assert False, {secret!r}\n"
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, "tests/test_calc.py::test_leak"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    out = run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert out.runnable
    assert out.fail_to_pass["tests/test_calc.py::test_leak"] == "FAILED"
    assert secret not in repr(out.to_dict()) and "***" in out.crash
    cached = list((tmp_path / "cache" / "test-baselines").glob("*.json"))
    assert cached and all(secret not in p.read_text() for p in cached)


@pytest.mark.slow
def test_test_cannot_write_into_the_repository_cache(tmp_path: Path) -> None:
    extra = ("\n\ndef test_plant():\n    import glob\n"
             f"    for d in glob.glob({str(tmp_path / 'cache' / '*' / '*')!r}):\n"
             "        open(d + '/planted', 'w').write('x')\n")
    inst, wt, _ = calc_instance(tmp_path, extra_tests=extra, f2p=[F2P, "tests/test_calc.py::test_plant"])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    run_hidden(make_runner(local_settings(), tmp_path / "cache"), inst, wt, patch)
    assert (tmp_path / "cache" / "repos").is_dir()
    assert not list((tmp_path / "cache" / "repos").rglob("planted"))
    assert not list((tmp_path / "cache" / "worktrees").rglob("planted"))
