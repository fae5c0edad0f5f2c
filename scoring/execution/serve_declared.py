"""Start the services a repository's committed table declares, run the test command, stop them.

Run inside the test's sandbox by the env's own interpreter (``scoring.execution.declared_services``),
as ``python -I -c <this file's text> SERVICES_JSON -- CMD...``, so the services share the tests'
network namespace: its own loopback, nothing beyond. Written for every Python an env may have
(3.6 upward): the standard library only, no newer syntax.

Each service in turn: its port (the declared one, else a free one of ``127.0.0.1``), its command
with ``{port}`` replaced, its binary found on the run's PATH (the env's bin, then the machine's) or
in the copy, started in a process group of its own with no stdin and its output kept aside; up once
the port accepts a connection within its seconds. Each outcome is a JSON line in
``$FIXGRAPH_SERVICES_FILE``. CMD then runs with the services' variables, and when it ends each
service's whole process group is stopped (SIGTERM, then SIGKILL) and this process ends as CMD did.
A service whose binary is missing, that fails before it listens or is not up in time (a command
that exits 0 may have left its server behind: its port decides): its line says why, the
services already up are stopped and CMD does not run (exit 3), so the run counts no test. When the
run's timeout kills this process, the sandbox's jail (PID 1) ends every process it left.
"""

import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NOT_STARTED = 3
STOP_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1
OUT_VAR = "FIXGRAPH_SERVICES_FILE"


class NotUp(Exception):
    pass


def _free_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _record(entry):
    path = os.environ.get(OUT_VAR, "")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")


def _last_line(log):
    log.seek(0)
    lines = [ln.strip() for ln in log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _die_with_parent():  # runs in the child: the service goes when this process goes
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _binary(word, env):
    if "/" in word:
        return word if os.path.isfile(word) else ""
    return shutil.which(word, path=env.get("PATH", "")) or ""


def _wait_up(proc, log, port, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        if _listening(port):
            return
        # A command that ends well may have left its server behind (a daemon, ``cmd &``): its port
        # still decides. One that fails has no server to wait for.
        if proc.poll() not in (None, 0):
            last = _last_line(log)
            raise NotUp(f"exited with code {proc.returncode} before listening on port {port}"
                        + (": " + last if last else ""))
        if time.monotonic() > deadline:
            raise NotUp(f"not listening on port {port} after {timeout_s:g}s"
                        + (" (its command exited with code 0)" if proc.poll() == 0 else ""))
        time.sleep(0.1)


def _start(service, env):
    """(process, port) of ``service`` once it listens; NotUp says why not (what it started is stopped)."""
    fixed = int(service.get("port") or 0)
    port = fixed or _free_port()
    if fixed and _listening(port):
        raise NotUp(f"port {port} is already in use")
    argv = [w.replace("{port}", str(port)) for w in shlex.split(service["command"])]
    exe = _binary(argv[0], env)
    if not exe:
        raise NotUp(f"{argv[0]} is not on the env's or the machine's PATH")
    log = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen([exe] + argv[1:], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as exc:
        log.close()
        raise NotUp(f"cannot start {argv[0]}: {exc}") from None
    try:
        _wait_up(proc, log, port, float(service.get("timeout_s") or 30))
    except NotUp:
        _stop(proc)
        raise
    finally:
        log.close()
    return proc, port


def _stop(proc):
    """Stop ``proc``'s whole process group: SIGTERM, then SIGKILL after a grace (what it forked too)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        print("[fixgraph] usage: SERVICES_JSON -- CMD...", file=sys.stderr, flush=True)
        os._exit(2)
    services = json.loads(argv[0])
    cmd = argv[2:]
    own = dict((k, v) for k, v in os.environ.items() if not k.startswith("FIXGRAPH_"))
    tests_env = dict((k, v) for k, v in os.environ.items() if k != OUT_VAR)
    started = []
    for service in services:
        start = time.monotonic()
        try:
            proc, port = _start(service, own)
        except NotUp as exc:
            _record({"name": service["name"], "ok": False, "reason": str(exc)})
            print(f"[fixgraph] service {service['name']} not started: {exc}", file=sys.stderr, flush=True)
            for done in reversed(started):
                _stop(done)
            os._exit(NOT_STARTED)
        started.append(proc)
        _record({"name": service["name"], "ok": True, "port": port,
                 "seconds": round(time.monotonic() - start, 2)})
        for var, value in service.get("env", {}).items():
            tests_env[var] = value.replace("{port}", str(port))
    try:
        code = subprocess.call(cmd, env=tests_env)
    except OSError as exc:
        print(f"[fixgraph] cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        code = 127
    for proc in reversed(started):
        _stop(proc)
    if code < 0:  # killed by a signal: end the same way, so the run reads the signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
